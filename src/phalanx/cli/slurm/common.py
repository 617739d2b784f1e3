"""Shared Slurm formatting: states, time strings, hostlists, job ids, field widths.

Everything here is standard library only and pure, but for ``my_user`` (which
asks the server). The tools import this module on every run, so it imports
almost nothing: no :mod:`re`, :mod:`datetime` or :mod:`typing` (hand scanners for
job references, format specifiers and timestamps). Time strings follow
``src/squeue/print.c`` ``_print_secs`` (``M:SS``, ``H:MM:SS``,
``D-HH:MM:SS``) and ``src/common/parse_time.c`` ``secs2time_str``
(``HH:MM:SS``, ``D-HH:MM:SS``, ``UNLIMITED``); hostlists follow
``src/common/hostlist.c`` (compress in the given order, no sorting).
"""

from __future__ import annotations

import sys
import time

from phalanx.hostranges import compress_hostlist
from phalanx.timefmt import epoch, format_duration

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

    from phalanx.client import Client

__all__ = [
    "FINISHED",
    "HET_MAX_COMPONENTS",
    "JOB_STATES",
    "STATE_CODES",
    "ArrayRef",
    "collapse_ranges",
    "compress_hostlist",
    "elapsed",
    "epoch",
    "expand_hostlist",
    "expand_ranges",
    "fit",
    "format_specs",
    "het_matches",
    "het_rows",
    "het_selected",
    "job_display_id",
    "mark_unavailable_nodes",
    "matches_refs",
    "parse_job_ref",
    "parse_states",
    "reason_of",
    "resolve",
    "secs2time",
    "server_states",
    "short_secs",
    "slurm_state",
    "slurm_time",
    "state_code",
    "tool_error",
]

STATE_CODES: dict[str, str] = {
    "PENDING": "PD",
    "CONFIGURING": "CF",
    "RUNNING": "R",
    "COMPLETING": "CG",
    "COMPLETED": "CD",
    "FAILED": "F",
    "CANCELLED": "CA",
    "TIMEOUT": "TO",
    "NODE_FAIL": "NF",
    "PREEMPTED": "PR",
    "OUT_OF_MEMORY": "OOM",
    "BOOT_FAIL": "BF",
    "DEADLINE": "DL",
    "SUSPENDED": "S",
    "STOPPED": "ST",
    "REQUEUED": "RQ",
    "REQUEUE_HOLD": "RH",
    "SPECIAL_EXIT": "SE",
    "RESIZING": "RS",
    "SIGNALING": "SI",
}
"""Slurm's base state names and their two-letter codes (squeue.1 JOB STATE CODES)."""

FINISHED = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)

_PHALANX_TO_SLURM = {"ADMITTED": "CONFIGURING"}

JOB_STATES = (
    "PENDING",
    "ADMITTED",
    "RUNNING",
    "COMPLETING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "PREEMPTED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
)
"""phalanx's job states (``phalanx.model.JobState``, spelled here: the tools do not load
the models)."""


def server_states(states: frozenset[str] | None) -> list[str] | None:
    """The phalanx states whose jobs Slurm names by one of ``states``, for the server to
    filter on (``None``: every state, or a set no job can be in, left to the caller)."""
    if states is None:
        return None
    wanted = [s for s in JOB_STATES if _PHALANX_TO_SLURM.get(s, s) in states]
    return wanted or None


_REASON_STATES = frozenset({"PENDING", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE"})


def my_user(client: Client) -> str:
    """``--me``: the token's user; for the admin token, the Unix user running the tool
    (whose name sbatch gives its jobs, as Slurm's tools do)."""
    who = client.whoami()
    if who.get("admin"):
        import getpass

        return getpass.getuser()
    return str(who["user"])


def tool_error(tool: str, message: str) -> None:
    """``<tool>: error: <message>`` on standard error, as Slurm's commands print it."""
    sys.stderr.write(f"{tool}: error: {message}\n")
    sys.stderr.flush()


def slurm_state(job: dict[str, Any]) -> str:
    """The job's state as Slurm names it (phalanx ADMITTED is Slurm's CONFIGURING)."""
    state = str(job.get("state") or "PENDING")
    return _PHALANX_TO_SLURM.get(state, state)


def state_code(state: str) -> str:
    return STATE_CODES.get(state, state[:2])


def reason_of(job: dict[str, Any]) -> str:
    """Slurm's reason name: ``slurm_reason`` if the server gives it, else a best guess."""
    reason = job.get("slurm_reason")
    if reason:
        return str(reason)
    state = slurm_state(job)
    if state == "FAILED":
        return "NonZeroExitCode"
    if state != "PENDING":
        return "None"
    if job.get("hold"):
        return "JobHeldUser"
    raw = str(job.get("reason") or "")
    return raw if raw and " " not in raw else "None"


_NODE_REASONS = frozenset({"Resources", "Priority", "None"})
"""The reasons Slurm's ReqNodeNotAvail replaces: where it would have looked at nodes."""

NODES_NOT_AVAILABLE = (
    "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
)
"""slurmctld's description of ReqNodeNotAvail for a job that names no nodes."""


def mark_unavailable_nodes(
    client: Any, jobs: list[dict[str, Any]], nodes_down: list[str] | None = None
) -> None:
    """Slurm's ``ReqNodeNotAvail`` as the ``slurm_reason`` of the pending jobs it applies
    to, as slurmctld describes it: ``ReqNodeNotAvail, UnavailableNodes:HOSTLIST`` for a
    job whose ``--nodelist`` names a drained or down node (checked before anything else
    about nodes), and :data:`NODES_NOT_AVAILABLE` for a job waiting on ``Resources``
    in a partition whose every node is drained or down. Asks for the nodes only when
    such a job is listed, and for the partitions only when a node is out of service;
    ``nodes_down`` (the server's list of nodes out of service, when it gave one) spares
    asking for the nodes when none is."""
    pending = [j for j in jobs if slurm_state(j) == "PENDING" and reason_of(j) in _NODE_REASONS]
    if not pending:
        return
    named = [j for j in pending if any(p.get("node_names") for p in j.get("pod_sets") or [])]
    anywhere = [j for j in pending if j not in named and reason_of(j) == "Resources"]
    if not named and not anywhere:
        return
    if nodes_down is not None and not nodes_down:
        return
    nodes = list(client.nodes())
    down = {
        n["metadata"]["name"]
        for n in nodes
        if str((n.get("status") or {}).get("state") or "") in ("draining", "drain", "down")
    }
    if not down:
        return
    for job in named:
        wanted = {name for p in job.get("pod_sets") or [] for name in p.get("node_names") or []}
        if missing := sorted(wanted & down):
            job["slurm_reason"] = f"ReqNodeNotAvail, UnavailableNodes:{compress_hostlist(missing)}"
    if not anywhere:
        return
    from phalanx.cli.slurm.sinfo import partition_nodes

    flavors = {f["metadata"]["name"]: f for f in client.resource_flavors()}
    out_of_service: set[str] = set()
    for cq in client.cluster_queues():
        members = partition_nodes(cq, flavors, nodes)
        if members and all(n["metadata"]["name"] in down for n in members):
            out_of_service.add(cq["metadata"]["name"])
    for job in anywhere:
        if (job.get("partition") or job.get("cluster_queue")) in out_of_service:
            job["slurm_reason"] = NODES_NOT_AVAILABLE


def reason_list(job: dict[str, Any]) -> str:
    """squeue ``%R``: ``(Reason)`` for pending/failed/timeout jobs, else the hostlist."""
    if slurm_state(job) in _REASON_STATES:
        return f"({reason_of(job)})"
    return compress_hostlist(job.get("nodes") or [])


def slurm_time(stamp: str | None, unknown: str = "N/A") -> str:
    """``YYYY-MM-DDTHH:MM:SS`` in local time, as Slurm prints times; ``unknown`` if none."""
    t = epoch(stamp)
    if t is None:
        return unknown
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def elapsed(job: dict[str, Any], now: float | None = None) -> int:
    """Seconds the job has run (0 before it starts)."""
    start = epoch(job.get("start_time"))
    if start is None:
        return 0
    end = epoch(job.get("end_time"))
    if end is None:
        end = time.time() if now is None else now
    return max(0, int(end - start))


def short_secs(seconds: int | None) -> str:
    """squeue's ``%M``/``%l``/``%L``: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``."""
    if seconds is None:
        return "UNLIMITED"
    if seconds < 0:
        return "INVALID"
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def secs2time(seconds: int | None) -> str:
    """sacct/scontrol durations: ``HH:MM:SS`` or ``D-HH:MM:SS``; ``UNLIMITED`` for none."""
    if seconds is None:
        return "UNLIMITED"
    if seconds < 0:
        return "INVALID"
    return format_duration(seconds)


def fit(text: str, width: int | None, right: bool) -> str:
    """Pad (and truncate) to ``width`` as squeue's ``%.N``/``%N`` fields do."""
    if width is None or width <= 0:
        return text
    text = text[:width]
    return text.rjust(width) if right else text.ljust(width)


# --------------------------------------------------------------------------- format specs

_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz%")


def format_specs(fmt: str, flag: str) -> list[tuple[int, int, bool, bool, str, str]]:
    r"""The ``%[.][FLAG][size]type`` specifiers of an ``-o`` format, as
    ``re.finditer(r"%(\.)?(FLAG)?(\d+)?([A-Za-z%])")`` finds them: ``(start, end,
    dot, flag, size digits, type letter)`` each; what lies between is literal text."""
    found = []
    size = len(fmt)
    at = fmt.find("%")
    while at >= 0:
        i = at + 1
        dot = i < size and fmt[i] == "."
        i += dot
        flagged = i < size and fmt[i] == flag
        i += flagged
        digits_at = i
        while i < size and fmt[i].isdecimal():
            i += 1
        if i < size and fmt[i] in _LETTERS:
            found.append((at, i + 1, dot, flagged, fmt[digits_at:i], fmt[i]))
            at = fmt.find("%", i + 1)
        else:
            at = fmt.find("%", at + 1)
    return found


# --------------------------------------------------------------------------- arrays


def expand_ranges(spec: str) -> list[int]:
    """Array indices of ``0-15:2,20`` (a ``%N`` throttle is ignored)."""
    spec = spec.split("%", 1)[0].strip().strip("[]")
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        step = 1
        if ":" in part:
            part, step_text = part.split(":", 1)
            step = int(step_text)
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1, max(1, step)))
        else:
            out.append(int(part))
    return out


def collapse_ranges(values: Iterable[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``1-3,7`` (in the given order, consecutive runs merged)."""
    parts: list[str] = []
    run: list[int] = []
    for v in values:
        if run and v == run[-1] + 1:
            run.append(v)
            continue
        if run:
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [v]
    if run:
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(parts)


def job_display_id(job: dict[str, Any]) -> str:
    """squeue ``%i``: ``12``, ``12_3`` (array task), ``12_[3-15%4]`` (pending summary) or
    ``12+1`` (a heterogeneous job's component, see :func:`het_rows`)."""
    if job.get("het_job_offset") is not None:
        return f"{job['het_job_id']}+{job['het_job_offset']}"
    array_id = job.get("array_job_id")
    if array_id is None:
        return str(job["id"])
    task = job.get("array_task_id")
    if task is not None:
        return f"{array_id}_{task}"
    spec = job.get("array_spec")
    return f"{array_id}_[{spec}]" if spec else str(job["id"])


class ArrayRef:
    """A job reference on the command line: ``12``, ``12_3``, ``12_[1-3]`` or ``12+1`` (a
    heterogeneous job's component)."""

    __slots__ = ("het_offset", "job_id", "tasks", "text")

    def __init__(
        self, text: str, job_id: int, tasks: list[int] | None, het_offset: int | None = None
    ) -> None:
        self.text = text
        self.job_id = job_id
        self.tasks = tasks
        """``None``: the job (or the whole array); else the array task indices."""
        self.het_offset = het_offset
        """``12+1``: the heterogeneous job component (``None``: no ``+``)."""

    def __repr__(self) -> str:
        return f"ArrayRef({self.text!r}, {self.job_id}, {self.tasks})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ArrayRef):
            return NotImplemented
        return (self.job_id, self.tasks) == (other.job_id, other.tasks)

    __hash__ = None  # type: ignore[assignment]


_RANGE_CHARS = frozenset("0123456789,-:%")


def parse_job_ref(text: str) -> ArrayRef | None:
    """``12`` / ``12_3`` / ``12_[1-3,5]`` / ``12+1``; ``None`` when it is not a job id."""
    text = text.strip()
    head, plus, offset = text.partition("+")
    if plus:
        if head.isdecimal() and offset.isdecimal():
            return ArrayRef(text, int(head), None, int(offset))
        return None
    head, underscore, task = text.partition("_")
    if not head.isdecimal():
        return None
    job_id = int(head)
    if not underscore:
        return ArrayRef(text, job_id, None)
    if task.isdecimal():
        return ArrayRef(text, job_id, [int(task)])
    if len(task) > 2 and task[0] == "[" and task[-1] == "]" and _RANGE_CHARS.issuperset(task[1:-1]):
        try:
            return ArrayRef(text, job_id, expand_ranges(task))
        except ValueError:
            return None
    return None


def resolve(client: Client, ref: ArrayRef) -> list[dict[str, Any]]:
    """The job views ``ref`` names; empty when none exists. A job that is no array's
    first task (whose id is the array's) is the answer to its own id: one request."""
    from phalanx import errors

    job = None
    if ref.tasks is None:
        try:
            job = client.get(ref.job_id)
        except errors.NotFound:
            job = None
        if job is not None and job.get("array_job_id") is None:
            return [job]
    members = list(client.jobs(array_job_id=ref.job_id))
    members = [m for m in members if m.get("array_job_id") is not None]
    members = [m for m in members if int(m["array_job_id"]) == ref.job_id]
    if ref.tasks is None:
        return members or ([job] if job is not None else [])
    wanted = set(ref.tasks)
    return [
        m for m in members if m.get("array_task_id") is not None and m["array_task_id"] in wanted
    ]


# --------------------------------------------------------------------------- states and refs

_STATE_NAMES = {
    "PD": "PENDING",
    "R": "RUNNING",
    "CG": "COMPLETING",
    "CD": "COMPLETED",
    "CF": "CONFIGURING",
    "F": "FAILED",
    "CA": "CANCELLED",
    "TO": "TIMEOUT",
    "NF": "NODE_FAIL",
    "PR": "PREEMPTED",
    "OOM": "OUT_OF_MEMORY",
    "S": "SUSPENDED",
    "ST": "STOPPED",
    "BF": "BOOT_FAIL",
    "DL": "DEADLINE",
    "RQ": "REQUEUED",
}


def parse_states(values: Sequence[str]) -> frozenset[str] | None:
    """``-t pd,R,running`` -> Slurm state names; ``None`` for ``all``."""
    from phalanx.errors import Invalid

    states: set[str] = set()
    for value in values:
        for item in value.split(","):
            item = item.strip().upper()
            if not item:
                continue
            if item == "ALL":
                return None
            name = _STATE_NAMES.get(item, item)
            if name not in _STATE_NAMES.values() and name not in ("REQUEUED", "SIGNALING"):
                raise Invalid(f"Invalid job state specified: {item}")
            states.add(name)
    return frozenset(states)


def matches_refs(job: dict[str, Any], refs: Sequence[Any]) -> bool:
    """Whether one of ``refs`` (:class:`ArrayRef`) names the job or its array."""
    for ref in refs:
        array_id = job.get("array_job_id")
        if ref.tasks is None:
            if int(job["id"]) == ref.job_id or (
                array_id is not None and int(array_id) == ref.job_id
            ):
                return True
            continue
        task = job.get("array_task_id")
        if (
            array_id is not None
            and int(array_id) == ref.job_id
            and (task is None or int(task) in ref.tasks)
        ):
            return True
    return False


# --------------------------------------------------------------------------- heterogeneous jobs

HET_MAX_COMPONENTS = 18
"""The most components of a heterogeneous job (``phalanx.model``'s, spelled here: the
tools do not load the models)."""


def het_rows(job: dict[str, Any]) -> list[dict[str, Any]]:
    """A heterogeneous job as Slurm's tools list it: one row per component (``12+0``,
    ``12+1``), each the job's view with the component's own id (the job's + N), nodes,
    sizes, GPUs, partition and pod set; any other job as itself."""
    components = job.get("het_components")
    if not components:
        return [job]
    pod_sets = {p.get("name"): p for p in job.get("pod_sets") or []}
    rows = []
    for component in components:
        pod_set = pod_sets.get(component.get("pod_set"))
        nodes = list(component.get("nodes") or [])
        indices = job.get("gpu_indices") or {}
        rows.append(
            {
                **job,
                "id": component["id"],
                "het_job_id": component["het_job_id"],
                "het_job_offset": component["het_job_offset"],
                "het_job_size": len(components),
                "partition": component.get("partition") or job.get("partition"),
                "nodes": nodes,
                "num_nodes": component.get("num_nodes"),
                "num_tasks": component.get("num_tasks"),
                "num_cpus": component.get("num_cpus"),
                "gpus": component.get("gpus") or 0,
                "pod_sets": [pod_set] if pod_set is not None else [],
                "gpu_indices": {n: indices[n] for n in nodes if n in indices},
                # The batch script runs in the first component only.
                "batch": bool(job.get("batch")) and component["het_job_offset"] == 0,
            }
        )
    return rows


def het_matches(job: dict[str, Any], refs: Iterable[ArrayRef]) -> bool:
    """Whether ``refs`` name one of a heterogeneous job's components by its own id
    (``13`` for ``12+1``) or as ``12+1``."""
    components = job.get("het_components") or []
    ids = {int(c["id"]) for c in components}
    return any(
        ref.job_id in ids or (ref.het_offset is not None and ref.job_id == int(job["id"]))
        for ref in refs
    )


def het_selected(row: dict[str, Any], refs: Iterable[ArrayRef], *, whole: bool) -> bool:
    """Whether a component row (:func:`het_rows`) is among ``refs``: the job's own id names
    every component, a component's id (``13``) that one; ``12+1`` names that one unless
    ``whole`` (squeue shows every component for it, as Slurm's does)."""
    if row.get("het_job_offset") is None:
        return True
    leader, offset = int(row["het_job_id"]), int(row["het_job_offset"])
    for ref in refs:
        if ref.het_offset is not None:
            if ref.job_id == leader and (whole or ref.het_offset == offset):
                return True
        elif ref.job_id == leader or (offset and ref.job_id == leader + offset):
            return True
    return False


# --------------------------------------------------------------------------- hostlists


def expand_hostlist(text: str) -> list[str]:
    """``tux[1-3],rack[1-2]-n[01-02]`` -> every name, in order (``show hostnames``).

    python-hostlist does the work, bounded (:mod:`phalanx.dialects.slurm.hostlists`);
    Slurm also takes whitespace as a separator. :class:`ValueError` for a bad one.
    """
    from phalanx.dialects.slurm.hostlists import BadHostlist
    from phalanx.dialects.slurm.hostlists import expand_hostlist as expand

    try:
        return expand(text, allow_duplicates=True)
    except BadHostlist as exc:
        raise ValueError(f"invalid hostlist {text!r}: {exc.detail}") from None
