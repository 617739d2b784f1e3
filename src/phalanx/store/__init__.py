"""The durable store: jobs, their event history, configuration objects and API tokens.

Everything the control plane must survive a restart with lives here, in SQLite
(``STATE/phalanx.db``, the default) or PostgreSQL. Open it with :meth:`Store.open`
(which applies the Alembic migrations shipped in ``migrations/``), write only inside
``with store.begin() as tx:`` and read through the :class:`Store` methods. Rows come
out as the frozen records of :mod:`phalanx.store.records`, never as ORM objects.
"""

from __future__ import annotations

from phalanx.store.records import (
    ApplyOutcome,
    JobChargeRow,
    JobEventRow,
    JobRow,
    NewJob,
    ObjectRow,
    TokenRow,
    UsageRow,
)
from phalanx.store.store import UNFINISHED_STATES, EventTuple, Store, Tx

__all__ = [
    "UNFINISHED_STATES",
    "ApplyOutcome",
    "EventTuple",
    "JobChargeRow",
    "JobEventRow",
    "JobRow",
    "NewJob",
    "ObjectRow",
    "Store",
    "TokenRow",
    "Tx",
    "UsageRow",
]
