"""Node health: ``phalanx up --health-check PROGRAM`` and ``--drain-after-failures N/WINDOW``.

:class:`HealthChecker` runs the health program for every node at start and
every ``interval_s`` (Slurm's ``HealthCheckProgram`` and ``HealthCheckInterval``),
in its own thread, outside the control loop: a node whose check fails (a
non-zero exit, or no exit within ``timeout_s``) is drained with the program's
first output line as the reason; a node the check drained is resumed when the
check passes again. A node drained for any other reason (by an admin, by
:class:`NodeFailures`) is left alone: the check's drains are the ones whose
reason is still the one it set (:attr:`~phalanx.model.Node.health_check_reason`).
Drains and resumes are applied as the admin, as ``phalanx apply`` would.

``interval_s`` 0 checks once, at start (Slurm's ``HealthCheckInterval=0``).

The program runs with the node's environment: ``SLURMD_NODENAME`` and
``PHALANX_NODE`` (the node's name) and ``CUDA_VISIBLE_DEVICES`` (its GPU
indices). On the local runtime every virtual node's check runs on this machine;
on the Ray runtime it runs on the node's machine, as a Ray task pinned to the
node (:meth:`phalanx.runtime.ray.runtime.RayRuntime.run_on_node`).

:class:`NodeFailures` counts the job attempts that failed for a node-side cause
(``NODE_FAIL``, or tasks the runtime killed for a lost node or supervisor;
never a user's non-zero exit) and drains a node that had ``N`` of them within
``WINDOW`` (``3 job failures in 1h: 12,15,17``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from phalanx.errors import Invalid, PhalanxError
from phalanx.model import AdminState, JobState, Node
from phalanx.runtime.spec import Exited
from phalanx.store.records import JobEventRow

__all__ = [
    "DEFAULT_INTERVAL_S",
    "DEFAULT_TIMEOUT_S",
    "CheckResult",
    "FailurePolicy",
    "HealthChecker",
    "NodeFailures",
    "check_result",
    "health_environment",
    "health_verdict",
    "node_environment",
    "node_side_failure",
    "run_program",
]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 300.0
"""``--health-check``'s interval. Slurm's ``HealthCheckInterval`` defaults to 0 (the
program runs only when slurmd starts); 300 s is a usual setting."""
DEFAULT_TIMEOUT_S = 60.0
"""slurmd kills a health check program that runs longer than 60 s."""
GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class CheckResult:
    """One node's check: passed, or failed with the reason to drain it with.

    A ``lasting`` failure (a GPU's XID error, seen once) drains the node as an admin
    would: a later check that passes does not resume it.
    """

    ok: bool
    reason: str = ""
    lasting: bool = False


def node_environment(node: Node) -> dict[str, str]:
    """What the health program's environment says about ``node``."""
    return {
        "SLURMD_NODENAME": node.name,
        "PHALANX_NODE": node.name,
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(node.capacity.get(GPU, 0))),
    }


def health_environment(node: Node, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the health program runs with on ``node`` (this machine's, and
    :func:`node_environment`)."""
    return {**(os.environ if base is None else base), **node_environment(node)}


def check_result(returncode: int | None, output: bytes, timeout_s: float) -> CheckResult:
    """The check a program's end makes (``returncode`` ``None``: it timed out)."""
    if returncode is None:
        return CheckResult(False, f"health check timed out after {timeout_s:g} s")
    if returncode == 0:
        return CheckResult(True)
    said = f"exit {returncode}" if returncode > 0 else f"signal {-returncode}"
    return CheckResult(False, _first_line(output) or f"health check failed ({said})")


def run_program(
    program: Sequence[str],
    node: Node,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> CheckResult:
    """Run the health program for ``node`` on this machine (a timeout is a failure);
    ``env``: what to set instead of :func:`node_environment` (a node epilog's)."""
    try:
        done = subprocess.run(
            list(program),
            env=health_environment(node) if env is None else {**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return check_result(None, b"", timeout_s)
    except OSError as exc:
        return CheckResult(False, f"health check could not run: {exc.strerror or exc}")
    return check_result(done.returncode, done.stdout, timeout_s)


def _first_line(output: bytes) -> str:
    for line in output.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


def health_verdict(node: Node, result: CheckResult) -> Node | None:
    """The node as the check leaves it, or ``None`` when nothing changes.

    A failed check drains an up node (or updates the reason of a drain it made);
    a passed check resumes a node it drained. Other drains, and down nodes, stay.
    """
    ours = node.state == AdminState.DRAIN and bool(
        node.health_check_reason and node.reason == node.health_check_reason
    )
    if not result.ok:
        if node.state == AdminState.UP or (ours and node.reason != result.reason):
            return node.model_copy(
                update={
                    "state": AdminState.DRAIN,
                    "reason": result.reason,
                    "health_check_reason": "" if result.lasting else result.reason,
                }
            )
        return None
    if ours:
        return node.model_copy(
            update={"state": AdminState.UP, "reason": "", "health_check_reason": ""}
        )
    return None


Runner = Callable[[Node], CheckResult | None]
"""Runs the check of one node (``None``: no verdict, the node could not be reached)."""


class HealthChecker:
    """Checks every node at start and every ``interval_s``, in its own thread.

    ``nodes`` reads the cluster's nodes, ``apply`` applies changed ones as the admin,
    ``leading`` says whether this server acts (a standby checks nothing). ``runner``
    checks one node; ``extra`` adds built-in checks for some nodes (``--detect``'s
    NVML check), run after the program passes.
    """

    def __init__(
        self,
        *,
        nodes: Callable[[], list[Node]],
        apply: Callable[[list[Node]], object],
        runner: Runner | None,
        interval_s: float = DEFAULT_INTERVAL_S,
        leading: Callable[[], bool] = lambda: True,
        extra: dict[str, Callable[[], tuple[str, bool] | None]] | None = None,
        workers: int = 8,
    ) -> None:
        if interval_s < 0:
            raise Invalid("--health-check-interval: must be 0 (at start only) or more seconds")
        self._nodes = nodes
        self._apply = apply
        self._runner = runner
        self.interval_s = interval_s
        self._leading = leading
        self._extra = dict(extra or {})
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="health-check")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0

    def start(self) -> HealthChecker:
        self._thread = threading.Thread(target=self._run, name="health-checker", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.check_all()
            except Exception:
                log.exception("node health check round failed")
            if self.interval_s == 0:
                return  # at start only (Slurm's HealthCheckInterval=0)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def check_one(self, node: Node) -> CheckResult | None:
        try:
            result = self._runner(node) if self._runner is not None else CheckResult(True)
        except Exception:
            log.exception("the health check of node %s could not run", node.name)
            return None
        if result is None:
            return None
        check = self._extra.get(node.name)
        if result.ok and check is not None:
            try:
                failure = check()
            except Exception as exc:
                failure = (f"health check failed: {exc}", False)
            if failure is not None:
                result = CheckResult(False, failure[0], lasting=failure[1])
        return result

    def check_all(self) -> list[Node]:
        """One round: check every node that is not down, apply what changed."""
        if not self._leading():
            return []
        nodes = [n for n in self._nodes() if n.state != AdminState.DOWN]
        results = list(self._pool.map(self.check_one, nodes))
        if self._stop.is_set():
            return []
        checked = {n.name: r for n, r in zip(nodes, results, strict=True) if r is not None}
        # Decide on the nodes as they are now: an admin may have changed one meanwhile.
        changed = [
            v
            for n in self._nodes()
            if n.name in checked and (v := health_verdict(n, checked[n.name])) is not None
        ]
        if changed and self._leading():
            for node in changed:
                if node.state == AdminState.DRAIN:
                    log.warning("health check drains node %s: %s", node.name, node.reason)
                else:
                    log.warning("health check passes again on node %s: resumed", node.name)
            try:
                self._apply(changed)
            except PhalanxError as exc:
                log.warning("applying the health check's node changes failed: %s", exc.detail)
        self.rounds += 1
        return changed


# ------------------------------------------------------------ failures per node

_POLICY = re.compile(r"\s*(\d+)\s*/\s*(\S+)\s*")


@dataclass(frozen=True)
class FailurePolicy:
    """``--drain-after-failures N/WINDOW``: ``count`` failures within ``window_s``."""

    count: int
    window_s: int
    window: str

    @classmethod
    def parse(cls, text: str) -> FailurePolicy:
        """``3/1h`` -> 3 failures within an hour (WINDOW as ``phalanx token --expires``)."""
        from phalanx.timefmt import parse_span

        m = _POLICY.fullmatch(text)
        if m is None or int(m.group(1)) < 1:
            raise Invalid(
                f"--drain-after-failures: {text!r}: expected N/WINDOW with N >= 1, e.g. 3/1h"
            )
        try:
            window = parse_span(m.group(2))
        except Invalid as exc:
            raise Invalid(f"--drain-after-failures: {exc.detail}") from None
        return cls(int(m.group(1)), window, m.group(2).strip())


def node_side_failure(event: Exited) -> bool:
    """Whether an attempt ended for a node-side cause: ``NODE_FAIL``, or ``FAILED``
    without an exit code (the runtime lost its supervisor or its node and killed its
    tasks). A task's own exit, zero or not, always has one."""
    return event.state == JobState.NODE_FAIL.value or (
        event.state == JobState.FAILED.value and event.exit_code is None
    )


def blamed_nodes(event: Exited, nodes: Sequence[str]) -> list[str]:
    """The job's nodes the failure is blamed on: the lost nodes the runtime names
    (``event.lost_nodes``), else those its message names, else all."""
    if event.lost_nodes:
        lost = set(event.lost_nodes)
        return [n for n in nodes if n in lost] or list(dict.fromkeys(event.lost_nodes))
    named = [n for n in nodes if re.search(rf"\b{re.escape(n)}\b", event.message)]
    return named or list(nodes)


class NodeFailures:
    """Counts node-side job failures per node; says when a node is to be drained.

    The counting is pure (:meth:`record`); :meth:`observe` is the control loop's
    hook and hands the drains to a thread of its own, which applies them as the
    admin outside the loop's transaction.
    """

    def __init__(self, policy: FailurePolicy) -> None:
        self.policy = policy
        self._failures: dict[str, deque[tuple[float, int, int]]] = {}
        self._drains: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._apply: Callable[[str, str], None] | None = None

    def record(self, node: str, job_id: int, when: float, attempt: int = 1) -> str | None:
        """Count one failed attempt; the drain reason when ``node`` has reached the limit
        (its count starts again from there)."""
        window = self._failures.setdefault(node, deque())
        if any(j == job_id and a == attempt for _, j, a in window):
            return None  # the same attempt told twice
        window.append((when, job_id, attempt))
        while window and window[0][0] <= when - self.policy.window_s:
            window.popleft()
        if len(window) < self.policy.count:
            return None
        jobs = ",".join(str(j) for _, j, _ in window)
        del self._failures[node]
        failures = "failure" if len(window) == 1 else "failures"
        return f"{len(window)} job {failures} in {self.policy.window}: {jobs}"

    def recover(self, events: Iterable[JobEventRow], now: float) -> int:
        """Count again, after a restart, the failures of the last window from the jobs'
        history (the ``Requeued`` and ``Finished`` events of attempts that a node-side
        failure ended keep where: ``failed_on``, and the lost nodes: ``exit_lost``).
        Replayed in time order as they were counted, so a count that reached the limit
        starts again where it did; the drains those reached were applied when they
        happened and are not applied again. The number of failures counted."""
        counted = 0
        since = now - self.policy.window_s
        for row in sorted(events, key=lambda e: (float(e.data.get("end_time") or e.time), e.id)):
            data = row.data
            nodes = data.get("failed_on")
            when = float(data.get("end_time") or row.time)
            if not nodes or when <= since or when > now:
                continue
            event = Exited(
                job_id=row.job_id,
                attempt=int(data.get("attempt") or 1),
                state=str(data.get("exit_state") or ""),
                exit_code=data.get("exit_code"),
                signal=data.get("signal"),
                start_time=data.get("start_time"),
                end_time=when,
                message=str(data.get("exit_message") or ""),
                lost_nodes=tuple(str(n) for n in data.get("exit_lost") or ()),
            )
            if node_side_failure(event):
                self.record_exit(event, [str(n) for n in nodes])
                counted += 1
        return counted

    def record_exit(self, event: Exited, nodes: Iterable[str]) -> list[tuple[str, str]]:
        """The drains an ended attempt brings: ``[(node, reason)]``."""
        if not node_side_failure(event):
            return []
        out = []
        for node in blamed_nodes(event, list(nodes)):
            reason = self.record(node, event.job_id, event.end_time, event.attempt)
            if reason is not None:
                out.append((node, reason))
        return out

    # -- wiring

    def start(self, drain: Callable[[str, str], None]) -> NodeFailures:
        self._apply = drain
        self._thread = threading.Thread(target=self._run, name="node-failures", daemon=True)
        self._thread.start()
        return self

    def observe(self, event: Exited, nodes: list[str]) -> None:
        """The control loop's hook: never blocks, never raises."""
        try:
            for drain in self.record_exit(event, nodes):
                self._drains.put(drain)
        except Exception:
            log.exception("counting a job failure failed")

    def stop(self) -> None:
        self._drains.put(None)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while (item := self._drains.get()) is not None:
            node, reason = item
            log.warning("draining node %s: %s", node, reason)
            assert self._apply is not None
            with contextlib.suppress(Exception):
                self._apply(node, reason)


def drain_if_up(
    nodes: Callable[[], list[Node]], apply: Callable[[list[Node]], object]
) -> Callable[[str, str], None]:
    """A drain for :class:`NodeFailures`: the node, if it is up, drained with ``reason``."""

    def drain(name: str, reason: str) -> None:
        for node in nodes():
            if node.name == name and node.state == AdminState.UP:
                try:
                    apply([node.model_copy(update={"state": AdminState.DRAIN, "reason": reason})])
                except PhalanxError as exc:
                    log.warning("draining node %s failed: %s", name, exc.detail)

    return drain
