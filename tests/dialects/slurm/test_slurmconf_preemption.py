"""slurm.conf's preemption keys reach the partitions' ClusterQueues."""

from __future__ import annotations

import pytest

from phalanx.dialects.slurm import read_slurm_conf
from phalanx.engine import PreemptionConfig
from phalanx.errors import Invalid
from phalanx.model import ClusterQueue

NODES = "NodeName=gpu[1-2] CPUs=8 RealMemory=1000 Gres=gpu:8\n"


def _queues(text: str) -> dict[str, ClusterQueue]:
    objs = read_slurm_conf(NODES + text, "slurm.conf")
    return {o.name: o for o in objs if isinstance(o, ClusterQueue)}


def test_qos_preemption_with_modes_grace_and_exempt_time() -> None:
    queues = _queues(
        "PreemptType=preempt/qos\n"
        "PreemptMode=REQUEUE\n"
        "PreemptExemptTime=00:10:00\n"
        "PartitionName=spot Nodes=ALL GraceTime=120\n"
        "PartitionName=prod Nodes=ALL PreemptMode=CANCEL\n"
        "PartitionName=pinned Nodes=ALL PreemptMode=OFF\n"
    )
    spot, prod, pinned = queues["spot"], queues["prod"], queues["pinned"]
    assert spot.preemption.within_cluster_queue == "LowerPriority"
    assert PreemptionConfig().for_queue(spot.annotations) == PreemptionConfig(
        mode="REQUEUE", grace_period_s=120, min_runtime_s=600
    )
    assert PreemptionConfig().for_queue(prod.annotations) == PreemptionConfig(
        mode="CANCEL", min_runtime_s=600
    )
    assert pinned.annotations["slurm.phalanx.io/preempt-mode"] == "OFF"
    assert pinned.preemption.within_cluster_queue == "Never"


def test_no_preempt_type_means_no_preemption() -> None:
    queues = _queues("PartitionName=p Nodes=ALL\n")
    assert queues["p"].preemption.within_cluster_queue == "Never"
    assert not any("preempt" in k or "grace" in k for k in queues["p"].annotations)
    partition_prio = _queues(
        "PreemptType=preempt/partition_prio\nPreemptMode=GANG\n"
        "PartitionName=p Nodes=ALL PriorityTier=2\n"
    )
    assert partition_prio["p"].annotations["slurm.phalanx.io/preempt-mode"] == "OFF"
    assert partition_prio["p"].preemption.within_cluster_queue == "Never"


def test_exempt_time_unlimited_and_mode_flags() -> None:
    queues = _queues(
        "PreemptType=preempt/qos\nPreemptMode=REQUEUE,WITHIN\nPreemptExemptTime=-1\n"
        "PartitionName=p Nodes=ALL\n"
    )
    assert queues["p"].annotations["slurm.phalanx.io/preempt-mode"] == "REQUEUE"
    assert "phalanx.io/min-runtime" not in queues["p"].annotations


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("PreemptType=preempt/nope\nPartitionName=p Nodes=ALL\n", r"slurm\.conf:2: PreemptType"),
        ("PreemptMode=SUSPEND,GANG\nPartitionName=p Nodes=ALL\n", r"slurm\.conf:2: .*SUSPEND"),
        ("PartitionName=p Nodes=ALL PreemptMode=sometimes\n", r"slurm\.conf:2: PreemptMode"),
        ("PartitionName=p Nodes=ALL GraceTime=soon\n", r"slurm\.conf:2: GraceTime=soon"),
        ("PreemptExemptTime=later\nPartitionName=p Nodes=ALL\n", r"slurm\.conf:2: PreemptExempt"),
    ],
)
def test_bad_values_name_the_line(text: str, message: str) -> None:
    with pytest.raises(Invalid, match=message):
        _queues(text)
