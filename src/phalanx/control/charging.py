"""Usage charging: the loop's side of the usage ledger (:mod:`phalanx.usage.ledger`).

Running jobs are charged in the loop's own transaction, so usage commits with
the transitions that caused it. On start the ledger is reloaded and each
running job is charged from where the store says it left off; after each
charge the engine gets the tenants' new figures (``TenantUsage`` events).
"""

from __future__ import annotations

from dataclasses import replace

from phalanx.control.state import LoopState
from phalanx.model import JobState
from phalanx.store import JobRow, Store, Tx

__all__ = ["Charging"]


class Charging:
    """Starts, charges and reloads the ledger's jobs; tells the engine the new usage."""

    def __init__(self, state: LoopState, store: Store) -> None:
        self.state = state
        self.store = store

    def load(self, now: float) -> None:
        """Reload the ledger; charge running jobs from where the store says it left off."""
        running = {r.id: r for r in self.store.list_jobs(states=[JobState.RUNNING.value])}
        charges = self.store.job_charges(running=True)
        self.state.usage.load(self.store.usage(), [c for c in charges if c.job_id in running], now)
        stale = [c for c in charges if c.job_id not in running]
        missing = [r for r in running.values() if r.id not in self.state.usage.running()]
        if stale or missing:
            with self.store.begin() as tx:
                tx.put_job_charges([replace(c, charged_until=None) for c in stale], new=False)
                for row in missing:
                    self.start(tx, row.id, row.start_time or now, row)
        for event in self.state.usage.events():
            self.state.engine.apply(event)

    def start(self, tx: Tx, job_id: int, since: float, row: JobRow | None = None) -> None:
        row = row or tx.get_job(job_id)
        if row is not None:
            cq = self.state.registry.get("ClusterQueue", row.cluster_queue or "")
            self.state.usage.start_job(tx, row, cq, since)

    def charge(self, tx: Tx, now: float) -> None:
        """Decay and charge usage when a calc period passed or a job stopped."""
        if not self.state.usage.due(now):
            return
        events = self.state.usage.tick(tx, now, self.state.registry.all("Tenant"))
        for event in events:
            self.state.engine.apply(event)
        if events:
            self.state.dirty = True
