"""``phalanx squeue``: Slurm's squeue over phalanx job views.

Formats follow squeue.1: the default ``%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R``,
``-l`` and ``--start`` layouts, ``-o`` ``%[.][size]type`` specifiers and
``-O`` ``Name[:[.]size]`` long names. Pending array tasks are collapsed into
one ``12_[3-15%4]`` line unless ``-r``. Standard library only.
"""

from __future__ import annotations

import time

from phalanx.cli.slurm.common import (
    collapse_ranges,
    compress_hostlist,
    elapsed,
    expand_ranges,
    fit,
    format_specs,
    het_matches,
    het_rows,
    het_selected,
    job_display_id,
    mark_unavailable_nodes,
    matches_refs,
    parse_states,
    reason_list,
    reason_of,
    short_secs,
    slurm_state,
    slurm_time,
    state_code,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

    Getter = Callable[[dict[str, Any], float], str]
    Part = tuple[str, int | None, bool, Getter | None]
    """(header or literal text, width, right-justified, value getter; None for literal text)."""

__all__ = [
    "DEFAULT_FORMAT",
    "LONG_FORMAT",
    "START_FORMAT",
    "collapse_arrays",
    "expand_arrays",
    "format_jobs",
    "matches_state",
    "parse_format",
    "parse_long_format",
]

DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"
STEPS_FORMAT = "%.15i %.8j %.9P %.8u %.9M %N"


def _null(value: Any) -> str:
    return "(null)" if value in (None, "") else str(value)


def _na(value: Any) -> str:
    return "N/A" if value is None else str(value)


def _nodes(job: dict[str, Any]) -> int:
    n = job.get("num_nodes")
    if n is None:
        n = len(job.get("nodes") or []) or 1
    return int(n)


def _cpus(job: dict[str, Any]) -> str:
    n = job.get("num_cpus")
    return "" if n is None else str(n)


def _time_left(job: dict[str, Any], now: float) -> str:
    limit = job.get("time_limit")
    if limit is None:
        return "UNLIMITED"
    return short_secs(max(0, int(limit) - elapsed(job, now)))


def _gres(job: dict[str, Any]) -> str:
    gpus = int(job.get("gpus") or 0)
    if not gpus:
        return "N/A"
    return f"gres/gpu:{gpus // max(1, _nodes(job))}"


def _memory(job: dict[str, Any]) -> str:
    for pod_set in job.get("pod_sets") or []:
        mem = (pod_set.get("requests") or {}).get("memory")
        if mem:
            return str(mem).replace("i", "")
    return "0"


def _array_task(job: dict[str, Any]) -> str:
    if job.get("array_task_id") is not None:
        return str(job["array_task_id"])
    if job.get("array_spec"):
        return str(job["array_spec"])
    return "N/A"


def _array_job(job: dict[str, Any]) -> str:
    return str(job["array_job_id"] if job.get("array_job_id") is not None else job["id"])


FIELDS: dict[str, tuple[str, Getter]] = {
    "a": ("ACCOUNT", lambda j, n: str(j.get("account") or j.get("tenant") or "")),
    "A": ("JOBID", lambda j, n: str(j["id"])),
    "b": ("TRES_PER_NODE", lambda j, n: _gres(j)),
    "C": ("CPUS", lambda j, n: _cpus(j)),
    "c": ("MIN_CPUS", lambda j, n: _cpus(j)),
    "D": ("NODES", lambda j, n: str(_nodes(j))),
    "e": ("END_TIME", lambda j, n: slurm_time(j.get("end_time"))),
    "E": ("DEPENDENCY", lambda j, n: _null(j.get("dependency"))),
    "f": ("FEATURES", lambda j, n: "(null)"),
    "F": ("ARRAY_JOB_ID", lambda j, n: _array_job(j)),
    "i": ("JOBID", lambda j, n: job_display_id(j)),
    "j": ("NAME", lambda j, n: str(j.get("name") or "")),
    "k": ("COMMENT", lambda j, n: _null(j.get("comment"))),
    "K": ("ARRAY_TASK_ID", lambda j, n: _array_task(j)),
    "l": ("TIME_LIMIT", lambda j, n: short_secs(j.get("time_limit"))),
    "L": ("TIME_LEFT", _time_left),
    "m": ("MIN_MEMORY", lambda j, n: _memory(j)),
    "M": ("TIME", lambda j, n: short_secs(elapsed(j, n))),
    "N": ("NODELIST", lambda j, n: compress_hostlist(j.get("nodes") or [])),
    "o": ("COMMAND", lambda j, n: " ".join(j.get("command") or [])),
    "p": ("PRIORITY", lambda j, n: _na(j.get("priority"))),
    "P": ("PARTITION", lambda j, n: str(j.get("partition") or j.get("cluster_queue") or "")),
    "q": ("QOS", lambda j, n: str(j.get("qos") or j.get("priority_class") or "normal")),
    "Q": ("PRIORITY", lambda j, n: _na(j.get("priority"))),
    "r": ("REASON", lambda j, n: reason_of(j)),
    "R": ("NODELIST(REASON)", lambda j, n: reason_list(j)),
    "S": ("START_TIME", lambda j, n: slurm_time(j.get("start_time") or j.get("estimated_start"))),
    "t": ("ST", lambda j, n: state_code(slurm_state(j))),
    "T": ("STATE", lambda j, n: slurm_state(j)),
    "u": ("USER", lambda j, n: str(j.get("user") or "")),
    "v": ("RESERVATION", lambda j, n: "(null)"),
    "V": ("SUBMIT_TIME", lambda j, n: slurm_time(j.get("submit_time"))),
    "y": ("NICE", lambda j, n: str(j.get("nice") or 0)),
    "Y": ("SCHEDNODES", lambda j, n: "(null)"),
    "Z": ("WORK_DIR", lambda j, n: str(j.get("working_dir") or "")),
}
"""squeue ``-o`` letters: header and value."""

LONG_NAMES: dict[str, tuple[str, Getter]] = {
    "account": FIELDS["a"],
    "arrayjobid": FIELDS["F"],
    "arraytaskid": FIELDS["K"],
    "command": FIELDS["o"],
    "comment": FIELDS["k"],
    "dependency": FIELDS["E"],
    "endtime": FIELDS["e"],
    "feature": FIELDS["f"],
    "jobarrayid": ("JOBID", FIELDS["i"][1]),
    "jobid": ("JOBID", lambda j, n: str(j["id"])),
    "minmemory": FIELDS["m"],
    "name": FIELDS["j"],
    "nice": FIELDS["y"],
    "nodelist": FIELDS["N"],
    "numcpus": FIELDS["C"],
    "numnodes": FIELDS["D"],
    "numtasks": ("TASKS", lambda j, n: _na(j.get("num_tasks"))),
    "partition": FIELDS["P"],
    "priority": FIELDS["Q"],
    "prioritylong": FIELDS["Q"],
    "qos": FIELDS["q"],
    "reason": FIELDS["r"],
    "reasonlist": FIELDS["R"],
    "starttime": FIELDS["S"],
    "state": FIELDS["T"],
    "statecompact": FIELDS["t"],
    "stderr": ("STDERR", lambda j, n: str(j.get("stderr") or "")),
    "stdout": ("STDOUT", lambda j, n: str(j.get("stdout") or "")),
    "submittime": FIELDS["V"],
    "timeleft": FIELDS["L"],
    "timelimit": FIELDS["l"],
    "timeused": FIELDS["M"],
    "tres-per-node": FIELDS["b"],
    "username": FIELDS["u"],
    "userid": FIELDS["u"],
    "workdir": FIELDS["Z"],
}
"""squeue ``-O`` names (case-insensitive)."""


def parse_format(fmt: str) -> list[Part]:
    """squeue ``-o``: ``%[.][size]type`` specifiers and literal text between them."""
    parts: list[Part] = []
    pos = 0
    for start, end, dot, _, digits, letter in format_specs(fmt, "-"):
        if start > pos:
            parts.append((fmt[pos:start], None, False, None))
        pos = end
        if letter == "%":
            parts.append(("%", None, False, None))
            continue
        field = FIELDS.get(letter)
        if field is None:
            from phalanx.errors import Invalid

            raise Invalid(f"squeue: error: Invalid job format specification: {letter}")
        width = int(digits) if digits else None
        parts.append((field[0], width, dot, field[1]))
    if pos < len(fmt):
        parts.append((fmt[pos:], None, False, None))
    return parts


def parse_long_format(fmt: str) -> list[Part]:
    """squeue ``-O``: ``Name[:[.]size]`` comma-separated; width 20 by default, left-justified."""
    parts: list[Part] = []
    for item in fmt.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, size = item.partition(":")
        field = LONG_NAMES.get(name.lower())
        if field is None:
            from phalanx.errors import Invalid

            raise Invalid(f"squeue: error: Invalid job format specification: {name}")
        right = size.startswith(".")
        digits = size.lstrip(".")
        width = int(digits) if digits.isdigit() else 20
        parts.append((field[0], width, right, field[1]))
    return parts


def format_jobs(
    jobs: Iterable[dict[str, Any]],
    parts: Sequence[Part],
    *,
    header: bool = True,
    now: float | None = None,
) -> str:
    """The squeue text: header line (unless ``header`` is false) and one line per job."""
    now = time.time() if now is None else now
    lines = []
    if header:
        lines.append("".join(text if get is None else fit(text, w, r) for text, w, r, get in parts))
    for job in jobs:
        lines.append(
            "".join(text if get is None else fit(get(job, now), w, r) for text, w, r, get in parts)
        )
    return "".join(line + "\n" for line in lines)


# --------------------------------------------------------------------------- arrays and filters


def collapse_arrays(jobs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pending tasks of one array become one line ``12_[3-15]``, at the first task's place."""
    out: list[dict[str, Any]] = []
    groups: dict[int, dict[str, Any]] = {}
    for job in jobs:
        array_id = job.get("array_job_id")
        pending = slurm_state(job) == "PENDING"
        if array_id is None or not pending or job.get("array_task_id") is None:
            out.append(job)
            continue
        group = groups.get(int(array_id))
        if group is None:
            group = dict(job)
            group["_tasks"] = []
            groups[int(array_id)] = group
            out.append(group)
        group["_tasks"].append(int(job["array_task_id"]))
    for group in groups.values():
        tasks = sorted(group.pop("_tasks"))
        if len(tasks) > 1:
            group["array_task_id"] = None
            spec = collapse_ranges(tasks)
            throttle = str(group.get("array_spec") or "")
            if "%" in throttle:
                spec += "%" + throttle.split("%", 1)[1]
            group["array_spec"] = spec
    return out


def expand_arrays(jobs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``-r``: a pending summary ``12_[3-5]`` becomes one line per task."""
    out: list[dict[str, Any]] = []
    for job in jobs:
        spec = job.get("array_spec")
        if job.get("array_job_id") is None or job.get("array_task_id") is not None or not spec:
            out.append(job)
            continue
        for task in expand_ranges(str(spec)):
            out.append({**job, "array_task_id": task, "array_spec": None})
    return out


DEFAULT_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING"})


def matches_state(job: dict[str, Any], states: frozenset[str] | None) -> bool:
    return states is None or slurm_state(job) in states


def sort_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Slurm's default order ``P,t,-p``: partition, state (running first), priority descending."""
    order = {"RUNNING": 0, "COMPLETING": 1, "CONFIGURING": 2, "PENDING": 3}

    def key(job: dict[str, Any]) -> tuple[str, int, int, int]:
        return (
            str(job.get("partition") or job.get("cluster_queue") or ""),
            order.get(slurm_state(job), 4),
            -int(job.get("priority") or 0),
            int(job["id"]),
        )

    return sorted(jobs, key=key)


def run(
    *,
    fmt: str | None,
    long_fmt: str | None,
    users: list[str] | None,
    jobs: list[str] | None,
    partitions: list[str] | None,
    states: list[str],
    accounts: list[str] | None,
    names: list[str] | None,
    noheader: bool,
    long: bool,
    start: bool,
    array: bool,
    me: bool,
    iterate: float | None,
    as_json: bool,
) -> int:
    """The squeue command; returns the exit status."""
    import sys

    from phalanx.cli.slurm.common import my_user, parse_job_ref, server_states, tool_error
    from phalanx.client import Client
    from phalanx.errors import Invalid, PhalanxError

    try:
        if long_fmt:
            parts = parse_long_format(long_fmt)
        else:
            chosen = fmt or (START_FORMAT if start else LONG_FORMAT if long else DEFAULT_FORMAT)
            parts = parse_format(chosen)
        wanted_states = parse_states(states) if states else None
    except Invalid as exc:
        message = exc.detail
        sys.stderr.write(message + "\n" if message.startswith("squeue:") else "")
        if not message.startswith("squeue:"):
            tool_error("squeue", message)
        return 1
    if not states:
        wanted_states = frozenset({"PENDING"}) if start else DEFAULT_STATES
    refs = []
    for text in jobs or []:
        ref = parse_job_ref(text)
        if ref is None:
            tool_error("squeue", f"Invalid job id: {text}")
            return 1
        refs.append(ref)
    if refs and not states:
        wanted_states = None
    try:
        with Client() as client:
            if me:
                users = [my_user(client)]
            while True:
                # One request where the server can: it leaves out the finished jobs
                # squeue would drop anyway and says which nodes are out of service.
                wanted_on_server = server_states(wanted_states)
                page = client.job_list(
                    user=users,
                    tenant=accounts,
                    name=names,
                    state=wanted_on_server,
                    nodes_down=True,
                )
                if page is None:  # an older server
                    listed = list(
                        client.jobs(user=users, tenant=accounts, name=names, state=wanted_on_server)
                    )
                else:
                    listed = page["items"]
                shown = [
                    j
                    for j in listed
                    if matches_state(j, wanted_states)
                    and (
                        not partitions
                        or (j.get("partition") or j.get("cluster_queue")) in partitions
                    )
                    and (not names or j.get("name") in names)
                    and (not refs or matches_refs(j, refs) or het_matches(j, refs))
                ]
                shown = sort_jobs(shown)
                mark_unavailable_nodes(client, shown, None if page is None else page["nodes_down"])
                shown = expand_arrays(shown) if array else collapse_arrays(shown)
                # A heterogeneous job: a line per component (12+0, 12+1), as Slurm's.
                shown = [
                    row
                    for job in shown
                    for row in het_rows(job)
                    if not refs or het_selected(row, refs, whole=True)
                ]
                if as_json:
                    import json

                    sys.stdout.write(json.dumps({"jobs": shown}, indent=2) + "\n")
                else:
                    if iterate:
                        sys.stdout.write(time.strftime("%a %b %d %H:%M:%S %Y") + "\n")
                    sys.stdout.write(format_jobs(shown, parts, header=not noheader))
                sys.stdout.flush()
                if not iterate:
                    return 0
                time.sleep(iterate)
    except PhalanxError as exc:
        tool_error("squeue", exc.detail)
        return 1
