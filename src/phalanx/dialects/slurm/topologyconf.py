"""``topology.conf`` -> a phalanx :class:`~phalanx.model.Topology` and each node's place in it.

Slurm reads ``topology.conf`` (topology.conf.5) beside ``slurm.conf`` when
``TopologyPlugin`` is ``topology/tree`` or ``topology/block``; ``phalanx import
slurm.conf`` does the same. Keys are case-insensitive, ``#`` starts a comment, a
trailing ``\\`` continues a line, node and switch names are hostlist expressions.

``topology/tree``: ``SwitchName=<name> Nodes=<hostlist>`` lines are the leaf
switches, ``SwitchName=<name> Switches=<hostlist>`` the switches above them.
Each node's chain of switches, leaf first, becomes labels
``slurm.phalanx.io/switch-0`` (its leaf switch), ``slurm.phalanx.io/switch-1``
(the one above), ... up to the tree's height; a node under a shorter chain repeats
its top switch for the levels above it, so every node has every level. The
Topology ``slurm-tree`` lists the levels highest first, then
``kubernetes.io/hostname``. Slurm keeps a job within one tree (no common parent,
no job across it); the top level of ``slurm-tree`` is that tree.

``topology/block``: ``BlockName=<name> Nodes=<hostlist>`` lines are the base
blocks, ``BlockSizes=<n>[,<n>...]`` (default: the size of the largest block) the
node counts of the base level and of each aggregate level above it, each a
power-of-two multiple of the one before. Blocks are aggregated in the order they
are written: with ``BlockSizes=30,120``, blocks 1-4 form one 120-node aggregate,
5-8 the next. Labels ``slurm.phalanx.io/block`` (the base block) and
``slurm.phalanx.io/block-<size>`` (e.g. ``block-120``: the aggregate's first
block and size, ``b1-120``); the Topology ``slurm-block`` lists the largest
aggregate first, then the base block, then ``kubernetes.io/hostname``.

A node in no switch or block carries no topology labels: it is outside the
topology (Slurm places only single-node jobs there).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection
from dataclasses import dataclass, field

from phalanx.dialects.slurm.sbatch import HOSTNAME_LABEL
from phalanx.dialects.slurm.slurmconf import _hosts, _logical_lines, _pairs
from phalanx.errors import Invalid
from phalanx.model.flavor import Topology, TopologyLevel

__all__ = [
    "BLOCK_LABEL",
    "SWITCH_LABEL",
    "TOPOLOGY_PLUGINS",
    "SlurmTopology",
    "read_topology_conf",
]

SWITCH_LABEL = "slurm.phalanx.io/switch-{}"
"""A node's switch ``k`` levels above it: ``switch-0`` is its leaf switch."""
BLOCK_LABEL = "slurm.phalanx.io/block"
"""A node's base block; ``block-<size>`` its aggregate of ``size`` nodes."""
TOPOLOGY_PLUGINS = {"topology/tree": "tree", "topology/block": "block"}
"""The ``TopologyPlugin`` values that read ``topology.conf``, and its form."""
MAX_LEVELS = 15
"""The most switch levels, or block sizes: a Topology has at most 16 levels, one of
them ``kubernetes.io/hostname``."""


@dataclass(frozen=True)
class SlurmTopology:
    """The Topology of a ``topology.conf`` and the labels that place each node in it."""

    topology: Topology
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per node name, its topology labels."""


def read_topology_conf(
    text: str, nodes: Collection[str], source: str = "topology.conf"
) -> SlurmTopology:
    """The topology of ``text``, over the ``nodes`` of the slurm.conf it goes with.

    Raises :class:`~phalanx.errors.Invalid` naming the file and line of the first
    problem: an unknown key, a node that slurm.conf does not define, a switch that
    is not defined or is its own ancestor, a node in two leaf switches or blocks,
    switches and blocks in one file, BlockSizes that do not double up.
    """
    switches: dict[str, tuple[int, str, list[str]]] = {}  # name -> (line, kind, children)
    blocks: dict[str, tuple[int, list[str]]] = {}
    sizes: tuple[int, list[int]] | None = None
    known = set(nodes)
    for number, line in _logical_lines(text):
        pairs = _pairs(source, number, line)
        if not pairs:
            continue
        key, value = pairs[0]
        attrs = dict(pairs[1:])
        if key == "switchname":
            _switch(source, number, value, attrs, switches, known)
        elif key == "blockname":
            extra = set(attrs) - {"nodes"}
            if extra:
                raise Invalid(
                    f"{source}:{number}: BlockName={value}: unknown key {sorted(extra)[0]!r} "
                    "(expected Nodes=)"
                )
            if value in blocks:
                raise Invalid(f"{source}:{number}: block {value} is defined twice")
            hosts = _hosts(source, number, attrs.get("nodes", ""))
            _check_nodes(source, number, f"block {value}", hosts, known)
            blocks[value] = (number, hosts)
        elif key == "blocksizes":
            if attrs:
                raise Invalid(f"{source}:{number}: BlockSizes takes no other keys on its line")
            counts = value.split(",")
            if len(counts) > MAX_LEVELS or not all(re.fullmatch(r"[0-9]{1,10}", c) for c in counts):
                raise Invalid(
                    f"{source}:{number}: BlockSizes={value[:40]}: expected at most {MAX_LEVELS} "
                    "node counts of at most 10 digits, e.g. 30,120"
                )
            sizes = (number, [int(c) for c in counts])
        else:
            raise Invalid(
                f"{source}:{number}: unknown key {key!r} (expected SwitchName=, BlockName= "
                "or BlockSizes=)"
            )
    if switches and (blocks or sizes):
        number = min(n for n, _, _ in switches.values())
        raise Invalid(
            f"{source}:{number}: SwitchName (topology/tree) and BlockName (topology/block) "
            "lines in one file: a topology.conf describes one or the other"
        )
    if switches:
        return _tree(source, switches)
    if blocks:
        return _blocks(source, blocks, sizes)
    if sizes is not None:
        raise Invalid(f"{source}:{sizes[0]}: BlockSizes without any BlockName line")
    raise Invalid(f"{source}: no SwitchName or BlockName lines: the topology is empty")


def _switch(
    source: str,
    number: int,
    name: str,
    attrs: dict[str, str],
    switches: dict[str, tuple[int, str, list[str]]],
    known: set[str],
) -> None:
    extra = set(attrs) - {"nodes", "switches", "linkspeed"}
    if extra:
        raise Invalid(
            f"{source}:{number}: SwitchName={name}: unknown key {sorted(extra)[0]!r} "
            "(expected Nodes=, Switches= or LinkSpeed=)"
        )
    if name in switches:
        raise Invalid(f"{source}:{number}: switch {name} is defined twice")
    if ("nodes" in attrs) == ("switches" in attrs):
        raise Invalid(
            f"{source}:{number}: switch {name}: expected Nodes= (a leaf switch) or Switches= "
            "(a switch above others), one of them"
        )
    if "nodes" in attrs:
        hosts = _hosts(source, number, attrs["nodes"])
        _check_nodes(source, number, f"switch {name}", hosts, known)
        switches[name] = (number, "nodes", hosts)
    else:
        switches[name] = (number, "switches", _hosts(source, number, attrs["switches"]))


def _check_nodes(source: str, number: int, what: str, hosts: list[str], known: set[str]) -> None:
    if not hosts:
        raise Invalid(f"{source}:{number}: {what} has no nodes")
    unknown = [h for h in hosts if h not in known]
    if unknown:
        raise Invalid(
            f"{source}:{number}: {what}: node {unknown[0]} has no NodeName line in slurm.conf"
        )


def _tree(source: str, switches: dict[str, tuple[int, str, list[str]]]) -> SlurmTopology:
    parent: dict[str, str] = {}
    leaf_of: dict[str, str] = {}
    for name, (number, kind, children) in switches.items():
        for child in children:
            if kind == "nodes":
                if child in leaf_of:
                    raise Invalid(
                        f"{source}:{number}: node {child} is already under switch "
                        f"{leaf_of[child]} (line {switches[leaf_of[child]][0]})"
                    )
                leaf_of[child] = name
                continue
            if child not in switches:
                raise Invalid(f"{source}:{number}: switch {name}: switch {child} is not defined")
            if child in parent:
                raise Invalid(
                    f"{source}:{number}: switch {child} is already under switch {parent[child]}"
                )
            parent[child] = name
    chains: dict[str, list[str]] = {}
    for leaf in {s for s in leaf_of.values()}:
        chain = [leaf]
        while chain[-1] in parent:
            up = parent[chain[-1]]
            if up in chain:
                raise Invalid(
                    f"{source}:{switches[up][0]}: switch {up} is below itself "
                    f"({' > '.join([*chain, up])})"
                )
            chain.append(up)
        chains[leaf] = chain
    if not chains:
        number = min(line for line, _, _ in switches.values())
        raise Invalid(
            f"{source}:{number}: no switch has Nodes=: the tree needs leaf switches "
            "(SwitchName=<name> Nodes=<hostlist>)"
        )
    height = max(len(chain) for chain in chains.values())
    if height > MAX_LEVELS:
        leaf = next(leaf for leaf, chain in chains.items() if len(chain) == height)
        raise Invalid(
            f"{source}:{switches[leaf][0]}: switch {leaf} is {height} levels below the top of "
            f"its tree; at most {MAX_LEVELS} levels of switches are supported"
        )
    labels: dict[str, dict[str, str]] = {}
    for host, leaf in leaf_of.items():
        chain = chains[leaf]
        labels[host] = {
            SWITCH_LABEL.format(k): chain[min(k, len(chain) - 1)] for k in range(height)
        }
    levels = [SWITCH_LABEL.format(k) for k in reversed(range(height))] + [HOSTNAME_LABEL]
    topology = Topology(
        name="slurm-tree", levels=[TopologyLevel(node_label=label) for label in levels]
    )
    return SlurmTopology(topology, labels)


def _blocks(
    source: str,
    blocks: dict[str, tuple[int, list[str]]],
    sizes: tuple[int, list[int]] | None,
) -> SlurmTopology:
    seen: dict[str, str] = {}
    for name, (number, hosts) in blocks.items():
        for host in hosts:
            if host in seen:
                raise Invalid(f"{source}:{number}: node {host} is already in block {seen[host]}")
            seen[host] = name
    largest = max(len(hosts) for _, hosts in blocks.values())
    number, levels = sizes if sizes is not None else (0, [largest])
    base = levels[0]
    if base < largest:
        name = next(n for n, (_, hosts) in blocks.items() if len(hosts) == largest)
        raise Invalid(
            f"{source}:{blocks[name][0]}: block {name} has {largest} nodes, more than the "
            f"base block size {base} (BlockSizes)"
        )
    for lower, upper in itertools.pairwise(levels):
        ratio = upper // lower
        if upper % lower or ratio < 2 or ratio & (ratio - 1):
            raise Invalid(
                f"{source}:{number}: BlockSizes={','.join(map(str, levels))}: each size must "
                f"be a power-of-two multiple (2x, 4x, ...) of the one before ({upper} after "
                f"{lower})"
            )
    names = list(blocks)
    labels: dict[str, dict[str, str]] = {}
    for i, name in enumerate(names):
        for host in blocks[name][1]:
            own = labels.setdefault(host, {BLOCK_LABEL: name})
            for size in levels[1:]:
                per = size // base
                first = names[i - i % per]
                own[f"{BLOCK_LABEL}-{size}"] = f"{first}-{size}"
    order = [f"{BLOCK_LABEL}-{size}" for size in reversed(levels[1:])]
    order += [BLOCK_LABEL, HOSTNAME_LABEL]
    topology = Topology(
        name="slurm-block", levels=[TopologyLevel(node_label=label) for label in order]
    )
    return SlurmTopology(topology, labels)
