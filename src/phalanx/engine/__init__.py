"""The admission engine: pure, deterministic, incremental.

>>> from phalanx.engine import Engine, Submit, Upsert
>>> engine = Engine()
>>> # engine.apply(Upsert(node)); engine.apply(Submit(job)); engine.cycle(now)
"""

from phalanx.engine.config import PRESETS, EngineConfig
from phalanx.engine.decisions import (
    Admit,
    Decision,
    Evict,
    NodeAssignment,
    Pending,
    PodSetAssignment,
)
from phalanx.engine.engine import Engine
from phalanx.engine.events import (
    Adopt,
    Cancel,
    Delete,
    Event,
    Finish,
    Requeue,
    Submit,
    TenantUsage,
    Upsert,
)
from phalanx.engine.ordering import FairShareWeights
from phalanx.engine.reasons import Reason, ReasonCode
from phalanx.engine.snapshot import export_state, load_state

__all__ = [
    "PRESETS",
    "Admit",
    "Adopt",
    "Cancel",
    "Decision",
    "Delete",
    "Engine",
    "EngineConfig",
    "Event",
    "Evict",
    "FairShareWeights",
    "Finish",
    "NodeAssignment",
    "Pending",
    "PodSetAssignment",
    "Reason",
    "ReasonCode",
    "Requeue",
    "Submit",
    "TenantUsage",
    "Upsert",
    "export_state",
    "load_state",
]
