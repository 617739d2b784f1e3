"""topology.conf (topology/tree and topology/block) -> a Topology and node labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.dialects.slurm import read_slurm_conf
from phalanx.dialects.slurm.topologyconf import read_topology_conf
from phalanx.engine import Engine, EngineConfig, Upsert
from phalanx.errors import Invalid
from phalanx.model import Node, ResourceFlavor, Topology

HOSTS = [f"tux{i}" for i in range(12)]
NODES = "NodeName=tux[0-11] CPUs=64 RealMemory=512000 Gres=gpu:8\n"

TREE = """\
# topology.conf.5's example, and a lone leaf switch
SwitchName=s0 Nodes=tux[0-3]
SwitchName=s1 Nodes=tux[4-7]
SwitchName=s2 Switches=s[0-1]   LinkSpeed=100
SwitchName=s3 Nodes=tux[8-9]
"""


def _levels(topology: Topology) -> list[str]:
    return [level.node_label for level in topology.levels]


def test_a_switch_tree_labels_every_node_with_its_switches() -> None:
    topo = read_topology_conf(TREE, HOSTS)
    assert topo.topology.name == "slurm-tree"
    assert _levels(topo.topology) == [
        "slurm.phalanx.io/switch-1",
        "slurm.phalanx.io/switch-0",
        "kubernetes.io/hostname",
    ]
    assert topo.labels["tux0"] == {
        "slurm.phalanx.io/switch-0": "s0",
        "slurm.phalanx.io/switch-1": "s2",
    }
    assert topo.labels["tux5"]["slurm.phalanx.io/switch-0"] == "s1"
    # A shorter chain repeats its top switch above it.
    assert topo.labels["tux8"] == {
        "slurm.phalanx.io/switch-0": "s3",
        "slurm.phalanx.io/switch-1": "s3",
    }
    # Nodes under no switch are outside the topology.
    assert "tux10" not in topo.labels


def test_blocks_aggregate_in_file_order_by_block_sizes() -> None:
    text = "".join(f"BlockName=b{i} Nodes=tux[{2 * i}-{2 * i + 1}]\n" for i in range(6))
    topo = read_topology_conf(text + "BlockSizes=2,8\n", HOSTS)
    assert topo.topology.name == "slurm-block"
    assert _levels(topo.topology) == [
        "slurm.phalanx.io/block-8",
        "slurm.phalanx.io/block",
        "kubernetes.io/hostname",
    ]
    assert topo.labels["tux0"] == {
        "slurm.phalanx.io/block": "b0",
        "slurm.phalanx.io/block-8": "b0-8",
    }
    assert topo.labels["tux7"]["slurm.phalanx.io/block-8"] == "b0-8"
    assert topo.labels["tux8"] == {
        "slurm.phalanx.io/block": "b4",
        "slurm.phalanx.io/block-8": "b4-8",
    }
    # Without BlockSizes: one level, the base blocks.
    plain = read_topology_conf("BlockName=b0 Nodes=tux[0-3]\nBlockName=b1 Nodes=tux[4-5]\n", HOSTS)
    assert _levels(plain.topology) == ["slurm.phalanx.io/block", "kubernetes.io/hostname"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SwitchName=s0 Nodes=tux[0-3,40]\n", "1: switch s0: node tux40 has no NodeName line"),
        ("SwitchName=s0 Switches=s9\n", "1: switch s0: switch s9 is not defined"),
        (
            "SwitchName=s0 Nodes=tux0\nSwitchName=s1 Nodes=tux0\n",
            "2: node tux0 is already under switch s0 (line 1)",
        ),
        (
            "SwitchName=s0 Nodes=tux0\nSwitchName=a Switches=s0,b\nSwitchName=b Switches=a\n",
            "switch a is below itself (s0 > a > b > a)",
        ),
        ("SwitchName=s0 Nodes=tux0 Switches=s1\n", "1: switch s0: expected Nodes= (a leaf"),
        ("SwitchName=s0 Nodes=tux0\nBlockName=b0 Nodes=tux1\n", "1: SwitchName (topology/tree)"),
        ("SwitchName=s0 Nodes=tux0 Speed=1\n", "1: SwitchName=s0: unknown key 'speed'"),
        ("Foo=bar\n", "1: unknown key 'foo' (expected SwitchName="),
        ("BlockName=b0 Nodes=tux[0-1]\nBlockSizes=2,6\n", "2: BlockSizes=2,6: each size must be"),
        ("BlockName=b0 Nodes=tux[0-3]\nBlockSizes=2\n", "1: block b0 has 4 nodes, more than"),
        ("BlockName=b0 Nodes=tux0\nBlockName=b1 Nodes=tux0\n", "2: node tux0 is already in"),
        ("BlockSizes=4\n", "1: BlockSizes without any BlockName line"),
        ("# nothing\n", "no SwitchName or BlockName lines"),
    ],
)
def test_bad_topology_conf_names_file_and_line(text: str, message: str) -> None:
    with pytest.raises(Invalid) as error:
        read_topology_conf(text, HOSTS, "/etc/slurm/topology.conf")
    assert error.value.detail.startswith("/etc/slurm/topology.conf")
    assert message in error.value.detail


def test_slurm_conf_with_a_topology_gives_flavors_a_topology_the_engine_accepts() -> None:
    conf = NODES + "TopologyPlugin=topology/tree\nPartitionName=gpu Nodes=ALL Default=YES\n"
    objects = read_slurm_conf(conf, "slurm.conf", (TREE, "topology.conf"))
    [topology] = [o for o in objects if isinstance(o, Topology)]
    [flavor] = [o for o in objects if isinstance(o, ResourceFlavor)]
    assert flavor.topology_name == topology.name == "slurm-tree"
    nodes = {o.name: o for o in objects if isinstance(o, Node)}
    assert nodes["tux4"].labels["slurm.phalanx.io/switch-1"] == "s2"
    assert nodes["tux4"].labels["slurm.phalanx.io/partition-gpu"] == "true"
    engine = Engine(EngineConfig())
    for obj in objects:
        engine.apply(Upsert(obj))
    assert engine.cache.flavors["gpu"].topology_name == "slurm-tree"
    assert "slurm-tree" in engine.cache.topologies


def test_import_reads_the_topology_conf_beside_slurm_conf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from phalanx.cli.main import main

    conf = tmp_path / "slurm.conf"
    conf.write_text(NODES + "TopologyPlugin=topology/tree\nPartitionName=gpu Nodes=ALL\n")
    assert main(["import", "--dry-run", str(conf)]) == 1
    assert capsys.readouterr().err == (
        f"phalanx: error: {conf}:2: TopologyPlugin=topology/tree reads "
        f"{tmp_path / 'topology.conf'}, which does not exist\n"
    )
    (tmp_path / "topology.conf").write_text(TREE)
    assert main(["import", "--dry-run", str(conf)]) == 0
    out = capsys.readouterr().out
    assert "kind: Topology" in out and "topologyName: slurm-tree" in out
    assert "slurm.phalanx.io/switch-0: s0" in out
    assert main(["import", "--dry-run", str(tmp_path / "topology.conf")]) == 1
    assert "this is a topology.conf; import the slurm.conf beside it" in capsys.readouterr().err
    conf.write_text(NODES + "TopologyPlugin=topology/torus\n")
    assert main(["import", "--dry-run", str(conf)]) == 1
    assert "TopologyPlugin=topology/torus is not supported" in capsys.readouterr().err
