"""Node epilogs: ``phalanx up --epilog PROGRAM`` (slurm.conf's ``Epilog``).

After each attempt of a job ends, the program runs once on every node of the job
that is not down, with Slurm's epilog environment (:func:`epilog_environment`):
on the local runtime on this machine, on the Ray runtime on the node's machine
(the health check's runners, :func:`~phalanx.control.health.run_program` and
:meth:`~phalanx.runtime.ray.runtime.RayRuntime.run_on_node`). A non-zero exit,
or no exit within :data:`EPILOG_TIMEOUT_S`, drains the node with the reason
``Epilog error``, as slurmd does.

For a job submitted with ``--requeue=expedite`` the attempt's end is recorded
only once its epilogs have returned: if one failed, the job is requeued
expedited instead of ending, holding its nodes whose epilog passed
(:mod:`phalanx.engine.expedite`); meanwhile it keeps its nodes, as a Slurm job
does while it is COMPLETING. Other jobs' ends are recorded at once; their
epilogs only drain.

The programs run in threads of their own, never in the control loop; the loop
takes the finished ones (:class:`EpilogDone`) with the runtime's events, so a
drain and the requeue it causes are recorded in one transaction.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, ThreadPoolExecutor
from dataclasses import dataclass

from phalanx.control.health import CheckResult
from phalanx.dialects.slurm.environment import compress_hostlist
from phalanx.model import Node
from phalanx.runtime.spec import Exited
from phalanx.store import JobRow

__all__ = [
    "EPILOG_REASON",
    "EPILOG_TIMEOUT_S",
    "EpilogDone",
    "EpilogRunner",
    "Epilogs",
    "epilog_environment",
]

log = logging.getLogger(__name__)

EPILOG_REASON = "Epilog error"
"""The reason a node whose epilog failed is drained with (Slurm's)."""
EPILOG_TIMEOUT_S = 300.0
"""An epilog still running after this long is killed, and counts as failed (Slurm's
``PrologEpilogTimeout``, which waits forever unless set: a bound keeps an expedited
job's end from waiting forever)."""

EpilogRunner = Callable[[Node, dict[str, str]], CheckResult | None]
"""Runs the epilog on one node with the epilog's environment (``None``: the node could
not be reached, no verdict)."""


@dataclass(frozen=True)
class EpilogDone:
    """The epilogs of one attempt returned."""

    job_id: int
    attempt: int
    failed: tuple[tuple[str, str], ...]
    """``(node, what the program said)`` for each node whose epilog failed."""
    exited: Exited | None
    """The attempt's end, held back until now (an expedite job); ``None``: recorded."""


def epilog_environment(row: JobRow, node: Node, event: Exited) -> dict[str, str]:
    """What slurmd sets for ``Epilog`` on ``node`` after ``row``'s attempt ``event``."""
    code, signum = event.exit_code or 0, event.signal or 0
    gpus = ((row.assignment or {}).get("gpus") or {}).get(node.name) or []
    env = {
        "SLURM_SCRIPT_CONTEXT": "epilog_slurmd",
        "SLURM_JOB_ID": str(row.id),
        "SLURM_JOBID": str(row.id),
        "SLURM_JOB_USER": row.user,
        "SLURM_JOB_ACCOUNT": row.tenant,
        "SLURM_JOB_PARTITION": row.cluster_queue or "",
        "SLURM_JOB_NODELIST": compress_hostlist(list(dict.fromkeys(row.nodes))),
        # As wait() returns it, and as exit:signal.
        "SLURM_JOB_EXIT_CODE": str(((code & 0xFF) << 8) | (signum & 0x7F)),
        "SLURM_JOB_EXIT_CODE2": f"{code}:{signum}",
        "SLURM_JOB_END_TIME": str(int(event.end_time)),
        "SLURMD_NODENAME": node.name,
        "PHALANX_NODE": node.name,
        # The job's GPUs on this node, by their global indices (as in Slurm's epilog).
        "SLURM_JOB_GPUS": ",".join(str(i) for i in gpus),
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpus),
    }
    start = row.start_time if row.start_time is not None else event.start_time
    if start is not None:
        env["SLURM_JOB_START_TIME"] = str(int(start))
    if row.array_job_id is not None and row.array_task_id is not None:
        env["SLURM_ARRAY_JOB_ID"] = str(row.array_job_id)
        env["SLURM_ARRAY_TASK_ID"] = str(row.array_task_id)
    return env


class Epilogs:
    """Runs the epilogs of ended attempts in a pool of threads; :meth:`poll` hands
    the control loop those that returned."""

    def __init__(self, program: Sequence[str], runner: EpilogRunner, workers: int = 8) -> None:
        self.program = list(program)
        self._runner = runner
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="epilog")
        self._done: queue.SimpleQueue[EpilogDone] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: set[tuple[int, int]] = set()

    def begin(self, event: Exited, row: JobRow, nodes: Sequence[Node], wait: bool) -> bool:
        """Run the epilogs of ``event``'s attempt on ``nodes`` (``wait``: its end is held
        back until they return). False if they run already (the end reported again)."""
        key = (event.job_id, event.attempt)
        with self._lock:
            if key in self._running:
                return False
            self._running.add(key)
        envs = [(node, epilog_environment(row, node, event)) for node in nodes]
        thread = threading.Thread(
            target=self._run, args=(key, envs, event if wait else None), daemon=True
        )
        thread.start()
        return True

    def poll(self) -> list[EpilogDone]:
        """The attempts whose epilogs returned since the last call."""
        out: list[EpilogDone] = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(
        self, key: tuple[int, int], envs: list[tuple[Node, dict[str, str]]], held: Exited | None
    ) -> None:
        try:
            results = list(self._pool.map(self._one, envs))
        except (RuntimeError, CancelledError):  # the pool was shut down: stopping
            return
        failed = tuple(
            (node.name, result.reason)
            for (node, _), result in zip(envs, results, strict=True)
            if result is not None and not result.ok
        )
        for name, said in failed:
            log.warning("epilog of job %s failed on node %s: %s", key[0], name, said)
        self._done.put(EpilogDone(key[0], key[1], failed, held))
        with self._lock:
            self._running.discard(key)

    def _one(self, item: tuple[Node, dict[str, str]]) -> CheckResult | None:
        node, env = item
        try:
            return self._runner(node, env)
        except Exception as exc:
            log.exception("the epilog of node %s could not run", node.name)
            return CheckResult(False, f"epilog could not run: {exc}")
