"""The admission engine: pure, deterministic, incremental.

>>> from phalanx.engine import Engine, Submit, Upsert
>>> engine = Engine()
>>> # engine.apply(Upsert(node)); engine.apply(Submit(job)); engine.cycle(now)
"""

from phalanx.engine.config import (
    PRESETS,
    EngineConfig,
    FairSharingConfig,
    PreemptionConfig,
    WaitForPodsReadyConfig,
)
from phalanx.engine.decisions import (
    Admit,
    Deactivate,
    Decision,
    Evict,
    NodeAssignment,
    NodesReplaced,
    Pending,
    PodSetAssignment,
)
from phalanx.engine.engine import Engine
from phalanx.engine.events import (
    Adopt,
    Cancel,
    Checkpoint,
    Delete,
    Event,
    Expedite,
    Finish,
    PodsReady,
    ReplaceNodes,
    Requeue,
    Submit,
    TenantUsage,
    Upsert,
)
from phalanx.engine.explain.reasons import Reason, ReasonCode
from phalanx.engine.priority.ordering import FairShareWeights
from phalanx.engine.snapshot import export_state, load_state

__all__ = [
    "PRESETS",
    "Admit",
    "Adopt",
    "Cancel",
    "Checkpoint",
    "Deactivate",
    "Decision",
    "Delete",
    "Engine",
    "EngineConfig",
    "Event",
    "Evict",
    "Expedite",
    "FairShareWeights",
    "FairSharingConfig",
    "Finish",
    "NodeAssignment",
    "NodesReplaced",
    "Pending",
    "PodSetAssignment",
    "PodsReady",
    "PreemptionConfig",
    "Reason",
    "ReasonCode",
    "ReplaceNodes",
    "Requeue",
    "Submit",
    "TenantUsage",
    "Upsert",
    "WaitForPodsReadyConfig",
    "export_state",
    "load_state",
]
