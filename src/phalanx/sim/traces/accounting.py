"""The live system's own accounting as a trace: what ran, replayed under another configuration.

``--trace accounting:STATE_DIR`` (the SQLite store of ``phalanx up``) or
``accounting:postgresql+psycopg://...`` reads every job that started and ended:
its submission time, its run time (end minus start of its last attempt), its
GPUs, its tenant and its time limit. Jobs that never ran (cancelled while
pending, still pending) are left out: their run time is unknown.
"""

from __future__ import annotations

from pathlib import Path

from phalanx.errors import Invalid
from phalanx.sim.trace import TraceJob, rebase

__all__ = ["load_accounting"]


def load_accounting(where: str) -> list[TraceJob]:
    """The finished jobs of the store at ``where`` (a state directory or a database URL)."""
    from phalanx.store import Store

    if "://" in where:
        url: str | None = where
        state_dir = Path.home() / ".cache" / "phalanx-sim"
    else:
        state_dir = Path(where)
        if not (state_dir / "phalanx.db").is_file():
            raise Invalid(f"--trace accounting:{where}: no phalanx store (phalanx.db) there")
        url = None
    store = Store.open(url, state_dir=state_dir)
    try:
        jobs: list[TraceJob] = []
        after: int | None = None
        while True:
            rows = store.list_jobs(after_id=after, limit=5000)
            if not rows:
                break
            after = rows[-1].id
            for row in rows:
                if row.start_time is None or row.end_time is None:
                    continue
                limit = row.parsed_submission.run.time_limit
                jobs.append(
                    TraceJob(
                        id=row.id,
                        submit=row.submit_time,
                        duration=max(row.end_time - row.start_time, 1e-3),
                        gpus=row.gpus,
                        tenant=row.tenant,
                        time_limit=float(limit) if limit else None,
                    )
                )
    finally:
        store.close()
    return rebase(jobs)
