"""Placement: which nodes (and which GPU devices) a pod set's tasks get.

The policies, by name (``EngineConfig.placement``, ``phalanx up --placement``):

``phalanx`` (default)
    A pod set one node holds is scored (:mod:`.chain`): FGD's fragmentation
    gradient first, then phalanx's usable-capacity cost (both against the
    workload the engine has learned from its submissions), then tasks without
    GPUs to nodes without GPUs, then the fixed node order. Gangs over several
    nodes: fewest nodes, tightest fit, or the tightest topology domain in a
    flavor with a Topology.
``tight``
    Every pod set on the fewest nodes with the tightest GPU fit
    (:class:`BestFit`), as phalanx placed before node scoring.
``fgd``, ``best-fit``, ``dot-product``, ``random``
    The FGD paper's policies, with its simulator's definitions
    (:mod:`.scores`), for comparison.

A comma-separated list of scorers (``fgd,best-fit``) makes a chain of its own:
the next scorer breaks the previous one's ties; the last tie goes to the node
order. The scorers: ``fgd``, ``capacity``, ``cpu-nodes``, ``best-fit``, ``dot-product``.
"""

from __future__ import annotations

from phalanx.engine.placement.base import (
    NodeFilter,
    Overlay,
    PlacementPolicy,
    PlacementResult,
    add_to_overlay,
    plan_devices,
    unit_amounts,
)
from phalanx.engine.placement.bestfit import BestFit
from phalanx.engine.placement.chain import (
    LowestRank,
    NodeFilterPlugin,
    Picker,
    RandomPick,
    ScoredPlacement,
)
from phalanx.engine.placement.scores import (
    BestFitScore,
    CapacityScore,
    CpuNodesScore,
    DotProductScore,
    FragmentationScore,
    NodeScorer,
)
from phalanx.engine.placement.workload import TaskShape, WorkloadProfile, task_shape

__all__ = [
    "PLACEMENTS",
    "SCORERS",
    "BestFit",
    "BestFitScore",
    "CapacityScore",
    "CpuNodesScore",
    "DotProductScore",
    "FragmentationScore",
    "LowestRank",
    "NodeFilter",
    "NodeFilterPlugin",
    "NodeScorer",
    "Overlay",
    "Picker",
    "PlacementPolicy",
    "PlacementResult",
    "RandomPick",
    "ScoredPlacement",
    "TaskShape",
    "WorkloadProfile",
    "add_to_overlay",
    "check_placement",
    "placement_policy",
    "plan_devices",
    "task_shape",
    "unit_amounts",
]

PLACEMENTS = ("phalanx", "tight", "fgd", "best-fit", "dot-product", "random")
"""The named policies."""
SCORERS = ("fgd", "capacity", "cpu-nodes", "best-fit", "dot-product")
"""The scorers a comma-separated chain may list."""
PHALANX_CHAIN = ("fgd", "capacity", "cpu-nodes")
"""The scorers of the default policy, in order."""


def check_placement(spec: str) -> None:
    """Raise ValueError unless ``spec`` names a policy or a chain of scorers."""
    if spec in PLACEMENTS:
        return
    names = [n.strip() for n in spec.split(",")]
    bad = [n for n in names if n not in SCORERS]
    if bad or not names:
        raise ValueError(
            f"placement must be one of {', '.join(PLACEMENTS)}, or a comma-separated chain "
            f"of the scorers {', '.join(SCORERS)}; got {spec!r}"
        )


def _scorer(name: str, workload: WorkloadProfile) -> NodeScorer:
    if name == "fgd":
        return FragmentationScore(workload)
    if name == "capacity":
        return CapacityScore(workload)
    if name == "cpu-nodes":
        return CpuNodesScore()
    if name == "best-fit":
        return BestFitScore()
    return DotProductScore()


def placement_policy(spec: str, workload: WorkloadProfile, seed: int = 0) -> PlacementPolicy:
    """The policy ``spec`` names (see the module docstring), reading ``workload``."""
    check_placement(spec)
    gang = BestFit()
    if spec == "tight":
        return gang
    if spec == "random":
        return ScoredPlacement(spec, (), RandomPick(seed), gang)
    names = PHALANX_CHAIN if spec == "phalanx" else tuple(n.strip() for n in spec.split(","))
    return ScoredPlacement(spec, [_scorer(n, workload) for n in names], LowestRank(), gang)
