"""``phalanx sacct``: accounting lines for jobs, in sacct's fixed-width or parsable layouts.

Default fields ``JobID JobName Partition Account AllocCPUS State ExitCode``
with sacct's widths, each field followed by one space, a ``-`` underline
row; ``-P`` joins with ``|`` (no trailing one), ``-p`` ends every line with
``|``. Values longer than their field end in ``+`` as sacct truncates them.
After each job come its steps: ``N.batch`` (a batch job's script, with the job's
times) and ``N.0``, ``N.1``, ... (its ``srun`` steps, as the runtime reported
them); ``-X`` shows the jobs alone, ``-j N.S`` that step alone.
``AllocTRES`` and the phalanx fields ``Charged`` (billable TRES-seconds charged,
undecayed) and ``GPUHours`` read the control plane's usage ledger.
``-D/--duplicates`` adds a job's earlier runs, oldest first, before its current
one: a run that was preempted and requeued shows as PREEMPTED, one lost with its
node as NODE_FAIL, one requeued by hand as REQUEUED.
"""

from __future__ import annotations

import time

from phalanx.cli.slurm.common import (
    compress_hostlist,
    elapsed,
    epoch,
    het_matches,
    het_rows,
    het_selected,
    job_display_id,
    secs2time,
    slurm_state,
    slurm_time,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

    Getter = Callable[[dict[str, Any], float], str]

__all__ = ["DEFAULT_FIELDS", "cell", "earlier_runs", "format_jobs", "parse_fields"]

DEFAULT_FIELDS = "jobid,jobname,partition,account,alloccpus,state,exitcode"
BRIEF_FIELDS = "jobid,state,exitcode"

STEP = "step_label"
"""A step row's key: ``batch`` or the step's number (``N.batch``, ``N.0``)."""


def _exit(job: dict[str, Any]) -> str:
    code = job.get("exit_code")
    sig = job.get("signal")
    if sig:
        return f"0:{int(sig)}"
    return f"{int(code or 0) & 0xFF}:0"


def _started(job: dict[str, Any]) -> bool:
    return job.get("start_time") is not None


def _alloc_cpus(job: dict[str, Any]) -> str:
    if not _started(job):
        return "0"
    return str(job.get("num_cpus") or 0)


def _nnodes(job: dict[str, Any]) -> str:
    n = job.get("num_nodes")
    if n is None:
        n = len(job.get("nodes") or []) or 1
    return str(n)


def _mem(job: dict[str, Any]) -> str:
    for pod_set in job.get("pod_sets") or []:
        mem = (pod_set.get("requests") or {}).get("memory")
        if mem:
            return str(mem).replace("i", "")
    return ""


def _tres(job: dict[str, Any], alloc: bool) -> str:
    if alloc and not _started(job):
        return ""
    parts = []
    cpus = job.get("num_cpus")
    if cpus:
        parts += [f"billing={cpus}", f"cpu={cpus}"]
    gpus = int(job.get("gpus") or 0)
    if gpus:
        parts.append(f"gres/gpu={gpus}")
    mem = _mem(job)
    if mem:
        parts.append(f"mem={mem}")
    parts.append(f"node={_nnodes(job)}")
    return ",".join(parts)


def _state(job: dict[str, Any]) -> str:
    return slurm_state(job)


CHARGE_KEY = "usage_charge"
"""Where :func:`run` puts the usage ledger's charges of a job (``/api/v1/usage/jobs``)."""
LEDGER_FIELDS = frozenset({"alloctres", "charged", "gpuhours"})
"""Fields read from the usage ledger."""


def _megabytes(mb: int) -> str:
    """Memory as Slurm's TRES strings write it: the largest unit that divides it."""
    for unit, size in (("T", 1 << 20), ("G", 1 << 10)):
        if mb and mb % size == 0:
            return f"{mb // size}{unit}"
    return f"{mb}M"


def _alloc_tres(job: dict[str, Any]) -> str:
    """``billing=N,cpu=N,gres/gpu=N,mem=N[MGT],node=N``: the ledger's allocation, billed
    with its ClusterQueue's weights."""
    charge = job.get(CHARGE_KEY)
    if not charge or job.get("het_job_offset") is not None:
        # A heterogeneous job's component: its own allocation (the ledger's is the job's).
        return _tres(job, True)
    alloc = dict(charge.get("alloc_tres") or {})
    alloc["billing"] = int(float(charge.get("billing") or 0))
    parts = []
    for name in sorted(alloc):
        value = int(alloc[name])
        parts.append(f"mem={_megabytes(value)}" if name == "mem" else f"{name}={value}")
    return ",".join(parts)


def _charged(job: dict[str, Any]) -> str:
    charge = job.get(CHARGE_KEY)
    return str(int(float(charge.get("billing_seconds") or 0))) if charge else "0"


def _gpu_hours(job: dict[str, Any]) -> str:
    charge = job.get(CHARGE_KEY)
    return f"{float(charge.get('gpu_seconds') or 0) / 3600:.2f}" if charge else "0.00"


_REQUEUED_AS = {
    "Preempted": "PREEMPTED",
    "NodeFail": "NODE_FAIL",
    "NodeDown": "NODE_FAIL",
    "NodeFailures": "NODE_FAIL",
}
"""The state of an earlier run, by the reason it was requeued for (else REQUEUED)."""


def _rfc3339(t: Any) -> str | None:
    if t is None:
        return None
    from datetime import UTC, datetime

    return datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def earlier_runs(job: dict[str, Any], events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job's runs before its current one, oldest first, from its ``Requeued`` and
    ``NodeReplaced`` events (each keeps the attempt that ended: its start, end and exit
    status; a run whose node was replaced ended NODE_FAIL)."""
    runs: list[dict[str, Any]] = []
    for event in events:
        data = event.get("data") or {}
        kind = event.get("kind")
        if kind not in ("Requeued", "NodeReplaced") or "attempt" not in data:
            continue
        if kind == "NodeReplaced":
            state = "NODE_FAIL"
        else:
            state = _REQUEUED_AS.get(str(event.get("reason")), "REQUEUED")
        code, sig = data.get("exit_code"), data.get("signal")
        if job.get("batch") and state != "NODE_FAIL":
            # As for a cancelled batch job, Slurm records the kill on the batch step.
            code, sig = 0, None
        runs.append(
            {
                **job,
                "state": state,
                "start_time": _rfc3339(data.get("start_time")),
                "end_time": _rfc3339(data.get("end_time")),
                "exit_code": code,
                "signal": sig,
                "attempt": data["attempt"],
            }
        )
    return runs


def _restarted(job: dict[str, Any]) -> bool:
    """Whether the job may have earlier runs (it was requeued at least once)."""
    attempt = int(job.get("attempt") or 0)
    return attempt > 1 or (attempt == 1 and job.get("state") == "PENDING")


FIELDS: dict[str, tuple[str, int, Getter]] = {
    "account": ("Account", 10, lambda j, n: str(j.get("account") or j.get("tenant") or "")),
    "alloccpus": ("AllocCPUS", 10, lambda j, n: _alloc_cpus(j)),
    "allocnodes": ("AllocNodes", 10, lambda j, n: _nnodes(j) if _started(j) else "0"),
    "alloctres": ("AllocTRES", 10, lambda j, n: _alloc_tres(j)),
    "charged": ("Charged", 12, lambda j, n: _charged(j)),
    "comment": ("Comment", 15, lambda j, n: str(j.get("comment") or "")),
    "elapsed": ("Elapsed", 10, lambda j, n: secs2time(elapsed(j, n))),
    "elapsedraw": ("ElapsedRaw", 10, lambda j, n: str(elapsed(j, n))),
    "end": ("End", 19, lambda j, n: slurm_time(j.get("end_time"), "Unknown")),
    "exitcode": ("ExitCode", 8, lambda j, n: _exit(j)),
    "gpuhours": ("GPUHours", 10, lambda j, n: _gpu_hours(j)),
    "jobid": ("JobID", -12, lambda j, n: _step_suffixed(job_display_id(j), j)),
    "jobidraw": ("JobIDRaw", -12, lambda j, n: _step_suffixed(str(j["id"]), j)),
    "ntasks": ("NTasks", 8, lambda j, n: str(j.get("step_tasks") or "")),
    "totalcpu": ("TotalCPU", 10, lambda j, n: _cpu_time(j.get("step_cpu"))),
    "usercpu": ("UserCPU", 10, lambda j, n: _cpu_time(j.get("step_user_cpu"))),
    "systemcpu": ("SystemCPU", 10, lambda j, n: _cpu_time(j.get("step_system_cpu"))),
    "maxrss": ("MaxRSS", 10, lambda j, n: _kilobytes(j.get("step_max_rss"))),
    "jobname": ("JobName", 10, lambda j, n: str(j.get("name") or "")),
    "ncpus": ("NCPUS", 10, lambda j, n: _alloc_cpus(j)),
    "nnodes": ("NNodes", 8, lambda j, n: _nnodes(j)),
    "nodelist": (
        "NodeList",
        15,
        lambda j, n: compress_hostlist(j.get("nodes") or []) or "None assigned",
    ),
    "partition": (
        "Partition",
        10,
        lambda j, n: (
            ""
            if j.get(STEP) is not None
            else str(j.get("partition") or j.get("cluster_queue") or "")
        ),
    ),
    "priority": (
        "Priority",
        10,
        lambda j, n: "" if j.get("priority") is None else str(j["priority"]),
    ),
    "qos": ("QOS", 10, lambda j, n: str(j.get("qos") or j.get("priority_class") or "normal")),
    "reason": ("Reason", 20, lambda j, n: str(j.get("slurm_reason") or "None")),
    "reqcpus": ("ReqCPUS", 8, lambda j, n: str(j.get("num_cpus") or "")),
    "reqmem": ("ReqMem", 10, lambda j, n: _mem(j)),
    "reqnodes": ("ReqNodes", 8, lambda j, n: _nnodes(j)),
    "reqtres": ("ReqTRES", 10, lambda j, n: _tres(j, False)),
    "start": ("Start", 19, lambda j, n: slurm_time(j.get("start_time"), "Unknown")),
    "state": ("State", 10, lambda j, n: _state(j)),
    "submit": ("Submit", 19, lambda j, n: slurm_time(j.get("submit_time"), "Unknown")),
    "timelimit": ("Timelimit", 10, lambda j, n: secs2time(j.get("time_limit"))),
    "timelimitraw": (
        "TimelimitRaw",
        12,
        lambda j, n: (
            "UNLIMITED" if j.get("time_limit") is None else str(int(j["time_limit"]) // 60)
        ),
    ),
    "user": ("User", 9, lambda j, n: str(j.get("user") or "")),
    "workdir": ("WorkDir", 30, lambda j, n: str(j.get("working_dir") or "")),
}
"""sacct fields: header, width (negative: left-justified), value."""

if TYPE_CHECKING:
    Field = tuple[str, int, Getter]


def _step_suffixed(text: str, row: dict[str, Any]) -> str:
    label = row.get(STEP)
    return text if label is None else f"{text}.{label}"


def _cpu_time(seconds: Any) -> str:
    """sacct's CPU times: ``MM:SS.mmm``, ``HH:MM:SS`` from an hour, ``D-HH:MM:SS``."""
    if seconds is None:
        return ""
    total = float(seconds)
    whole = int(total)
    if whole < 3600:
        millis = round((total - whole) * 1000)
        if millis == 1000:
            whole, millis = whole + 1, 0
        return f"{whole // 60:02d}:{whole % 60:02d}.{millis:03d}"
    return secs2time(whole)


def _kilobytes(kb: Any) -> str:
    if kb is None:
        return ""
    return f"{int(kb)}K"


_BATCH_STATE = {"TIMEOUT": "CANCELLED", "PREEMPTED": "CANCELLED", "NODE_FAIL": "CANCELLED"}
"""The batch step's state when the job's end was not the script's own (Slurm kills it)."""


def step_rows(job: dict[str, Any], steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job's step rows after it: ``N.batch`` (a batch job that started) and one per
    ``srun`` step, each a job view with the step's name, times, state and usage."""
    rows: list[dict[str, Any]] = []
    common = {"slurm_reason": None}
    nodes = list(job.get("nodes") or [])
    if job.get("batch") and job.get("start_time") is not None:
        state = str(job.get("state") or "")
        batch: dict[str, Any] = {**job, **common, STEP: "batch", "name": "batch"}
        if state in ("CANCELLED", *_BATCH_STATE):
            # The script was killed: Slurm records SIGTERM on the batch step.
            batch.update(state=_BATCH_STATE.get(state, "CANCELLED"), exit_code=0, signal=15)
        # The batch shell's node alone: its CPUs, one task.
        cpus = int(job.get("num_cpus") or 0) // max(1, len(nodes))
        batch.update(nodes=nodes[:1], num_nodes=1, num_cpus=cpus or None, step_tasks=1)
        rows.append(batch)
    for step in steps:
        end = step.get("end")
        step_nodes = list(step.get("nodes") or [])
        ntasks = int(step.get("ntasks") or 0)
        cpus = ntasks * int(step.get("cpusPerTask") or 1)
        user, system = step.get("userCpu"), step.get("systemCpu")
        rows.append(
            {
                **job,
                **common,
                STEP: str(step.get("step")),
                "name": str(step.get("name") or ""),
                "state": str(step.get("state") or "RUNNING"),
                "exit_code": int(step.get("exitCode") or 0),
                "signal": step.get("signal"),
                "start_time": _rfc3339(step.get("start")),
                "end_time": _rfc3339(end) if end is not None else None,
                "nodes": step_nodes,
                "num_nodes": len(step_nodes),
                "num_cpus": cpus,
                "step_tasks": ntasks,
                "step_cpu": None if user is None else float(user) + float(system or 0),
                "step_user_cpu": user,
                "step_system_cpu": system,
                "step_max_rss": step.get("maxRssKb"),
                "time_limit": None,
            }
        )
    return rows


def het_job_rows(
    job: dict[str, Any],
    steps: Sequence[dict[str, Any]],
    *,
    earlier: Sequence[dict[str, Any]] = (),
    with_steps: bool = True,
    refs: Sequence[Any] = (),
    only_steps: dict[str, set[str]] | None = None,
) -> list[dict[str, Any]]:
    """A heterogeneous job's lines, as Slurm's sacct: per component ``N+K`` (its earlier
    runs first with ``-D``), then its steps: ``N+0.batch`` and each step that ran
    tasks in it (``N+K.S``, with the component's tasks, nodes and command). ``refs``
    (``-j``) keep the components they name; ``only_steps`` (``-j N+K.S``) the steps."""
    out: list[dict[str, Any]] = []
    before = [het_rows(run) for run in earlier]
    for component in het_rows(job):
        if refs and not het_selected(component, refs, whole=False):
            continue
        offset = int(component["het_job_offset"])
        out += [rows[offset] for rows in before if offset < len(rows)]
        rows = [component]
        if with_steps:
            rows += step_rows(component, _component_steps(steps, offset))
        wanted = (only_steps or {}).get(job_display_id(component))
        if wanted is None and offset == 0:
            wanted = (only_steps or {}).get(str(job["id"]))
        if wanted is not None:
            rows = [r for r in rows if r.get(STEP) in wanted]
        out += rows
    return out


def _component_steps(steps: Sequence[dict[str, Any]], offset: int) -> list[dict[str, Any]]:
    """The steps of a heterogeneous job that ran tasks in component ``offset``, each with
    those tasks alone (a step without ``taskComponents`` ran in component 0)."""
    out: list[dict[str, Any]] = []
    for step in steps:
        owners = step.get("taskComponents")
        if owners is None:
            if offset == 0:
                out.append(step)
            continue
        task_nodes = step.get("taskNodes") or []
        nodes = [n for n, k in zip(task_nodes, owners, strict=False) if k == offset]
        if not nodes:
            continue
        names = step.get("componentNames") or {}
        out.append(
            {
                **step,
                "nodes": list(dict.fromkeys(nodes)),
                "taskNodes": nodes,
                "ntasks": len(nodes),
                "name": names.get(str(offset), step.get("name")),
            }
        )
    return out


def parse_fields(text: str) -> list[Field]:
    """``-o jobid,jobname%30,state``: sacct field names with optional ``%width``."""
    from phalanx.errors import Invalid

    out: list[Field] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, width = item.partition("%")
        field = FIELDS.get(name.lower())
        if field is None:
            raise Invalid(f'Invalid field requested: "{name}"')
        size = field[1]
        if width:
            try:
                size = int(width) if size > 0 else -int(width)
            except ValueError:
                raise Invalid(f'Invalid field width: "{item}"') from None
        out.append((field[0], size, field[2]))
    return out


def cell(text: str, size: int) -> str:
    """``text`` in a field ``size`` wide (negative: left-justified), cut with ``+`` as
    sacct cuts a value too long for its field."""
    width = abs(size)
    if len(text) > width:
        text = text[: width - 1] + "+" if width > 1 else text[:width]
    return text.ljust(width) if size < 0 else text.rjust(width)


def format_jobs(
    jobs: Iterable[dict[str, Any]],
    fields: Sequence[Field],
    *,
    header: bool = True,
    parsable: str | None = None,
    now: float | None = None,
) -> str:
    """sacct text; ``parsable``: ``"trailing"`` (``-p``) or ``"plain"`` (``-P``)."""
    now = time.time() if now is None else now
    rows = [[get(job, now) for _, _, get in fields] for job in jobs]
    lines = []
    if parsable is not None:
        end = "|" if parsable == "trailing" else ""
        if header:
            lines.append("|".join(f[0] for f in fields) + end)
        lines += ["|".join(row) + end for row in rows]
    else:
        if header:
            lines.append("".join(cell(f[0], f[1]) + " " for f in fields))
            lines.append("".join("-" * abs(f[1]) + " " for f in fields))
        lines += [
            "".join(cell(v, f[1]) + " " for v, f in zip(row, fields, strict=True)) for row in rows
        ]
    return "".join(line + "\n" for line in lines)


def _local_midnight() -> float:
    """Today's 00:00 local time in epoch seconds, as ``datetime.now().replace(hour=0,
    minute=0, second=0, microsecond=0).timestamp()`` gives it; without :mod:`datetime`
    (sacct's default start) unless the UTC offset changes within three hours of it."""
    now = time.localtime()
    day = (now.tm_year, now.tm_mon, now.tm_mday)
    stamp = time.mktime((*day, 0, 0, 0, 0, 0, -1))
    around = time.localtime(stamp - 10800).tm_gmtoff, time.localtime(stamp + 10800).tm_gmtoff
    if around[0] == around[1] and tuple(time.localtime(stamp))[:6] == (*day, 0, 0, 0):
        return stamp
    from datetime import datetime

    return datetime.now().replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def parse_when(text: str) -> float:
    """sacct ``-S``/``-E``: ``YYYY-MM-DD[THH:MM[:SS]]``, ``HH:MM[:SS]``, ``now[-1hours]``."""
    from phalanx.errors import Invalid

    raw = text.strip()
    lower = raw.lower()
    if lower.startswith("now"):
        rest = lower[3:]
        if not rest:
            return time.time()
        units = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400, "weeks": 604800}
        sign = -1 if rest[0] == "-" else 1
        body = rest[1:]
        digits = "".join(ch for ch in body if ch.isdigit())
        unit = body[len(digits) :] or "seconds"
        for name, scale in units.items():
            if name.startswith(unit) and digits:
                return time.time() + sign * int(digits) * scale
        raise Invalid(f"Invalid time specification: {text}")
    if lower in ("midnight", "today"):
        return _local_midnight()
    from datetime import datetime

    for fmt in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d", "%m/%d/%y", "%m/%d"):
        try:
            stamp = datetime.strptime(raw, fmt)
        except ValueError:
            continue
        if fmt == "%m/%d":
            stamp = stamp.replace(year=datetime.now().year)
        return stamp.timestamp()
    for fmt in ("%H:%M:%S", "%H:%M"):
        try:
            clock = datetime.strptime(raw, fmt)
        except ValueError:
            continue
        return (
            datetime.now()
            .replace(hour=clock.hour, minute=clock.minute, second=clock.second, microsecond=0)
            .timestamp()
        )
    raise Invalid(f"Invalid time specification: {text}")


def in_window(job: dict[str, Any], start: float | None, end: float | None) -> bool:
    """Whether the job existed (submitted..ended) at some time in ``[start, end]``."""
    begin = epoch(job.get("start_time")) or epoch(job.get("submit_time")) or 0.0
    finish = epoch(job.get("end_time"))
    if end is not None and begin > end:
        return False
    return not (start is not None and finish is not None and finish < start)


def run(
    *,
    jobs: list[str] | None,
    fields: str | None,
    brief: bool,
    noheader: bool,
    parsable: bool,
    parsable2: bool,
    starttime: str | None,
    endtime: str | None,
    states: list[str] | None,
    users: list[str] | None,
    allusers: bool,
    accounts: list[str] | None,
    partitions: list[str] | None,
    names: list[str] | None,
    as_json: bool,
    duplicates: bool = False,
    allocations: bool = False,
) -> int:
    """The sacct command; returns the exit status."""
    import os
    import sys

    from phalanx.cli.slurm.common import matches_refs, parse_job_ref, parse_states, tool_error
    from phalanx.client import Client
    from phalanx.errors import Invalid, PhalanxError

    try:
        chosen = (
            fields or os.environ.get("SACCT_FORMAT") or (BRIEF_FIELDS if brief else DEFAULT_FIELDS)
        )
        parsed = parse_fields(chosen)
        wanted = parse_states(states) if states else None
        start = parse_when(starttime) if starttime else None
        end = parse_when(endtime) if endtime else None
    except Invalid as exc:
        tool_error("sacct", exc.detail)
        return 1
    refs = []
    only_steps: dict[str, set[str]] = {}
    """``-j N.S``: the job's rows shown are that step's only."""
    for text in jobs or []:
        base, dot, label = text.partition(".")
        ref = parse_job_ref(base)
        if ref is None:
            tool_error("sacct", f"Invalid job id: {text}")
            return 1
        refs.append(ref)
        if dot:
            only_steps.setdefault(base, set()).add(label)
    if start is None and not refs and not states:
        start = parse_when("midnight")
    try:
        with Client() as client:
            # One request where the server can: the caller's jobs (unless -u or -a) with
            # their steps (unless -X).
            mine = not users and not allusers
            page = client.job_list(
                user=users, tenant=accounts, name=names, mine=mine, steps=not allocations
            )
            if page is None:  # an older server: whoami, jobs, then steps
                if mine:
                    me = client.whoami()
                    if not me.get("admin"):
                        users = [str(me["user"])]
                listed = list(client.jobs(user=users, tenant=accounts, name=names))
            else:
                listed = page["items"]
            chosen_jobs = [
                j
                for j in listed
                if (not refs or matches_refs(j, refs) or het_matches(j, refs))
                and (not partitions or (j.get("partition") or j.get("cluster_queue")) in partitions)
                and (not names or j.get("name") in names)
            ]
            steps: dict[str, list[dict[str, Any]]] = {}
            if not allocations and chosen_jobs:
                steps = (
                    page["steps"]
                    if page is not None
                    else client.steps_of(int(j["id"]) for j in chosen_jobs)
                )
            runs: list[dict[str, Any]] = []
            for j in chosen_jobs:
                if j.get("het_components"):
                    runs += het_job_rows(
                        j,
                        steps.get(str(j["id"])) or [],
                        earlier=(
                            earlier_runs(j, client.events(int(j["id"])))
                            if duplicates and _restarted(j)
                            else []
                        ),
                        with_steps=not allocations,
                        refs=refs,
                        only_steps=only_steps,
                    )
                    continue
                if duplicates and _restarted(j):
                    runs += earlier_runs(j, client.events(int(j["id"])))
                rows = [j]
                if not allocations:
                    rows += step_rows(j, steps.get(str(j["id"])) or [])
                wanted_steps = only_steps.get(job_display_id(j)) or only_steps.get(str(j["id"]))
                if wanted_steps is not None:
                    rows = [r for r in rows if r.get(STEP) in wanted_steps]
                runs += rows
    except PhalanxError as exc:
        tool_error("sacct", exc.detail)
        return 1
    shown = [
        j for j in runs if (wanted is None or slurm_state(j) in wanted) and in_window(j, start, end)
    ]
    if any(f[0].lower() in LEDGER_FIELDS for f in parsed) and shown:
        try:
            with Client() as client:
                charges = client.job_charges(int(j["id"]) for j in shown)
        except PhalanxError as exc:
            tool_error("sacct", exc.detail)
            return 1
        shown = [{**j, CHARGE_KEY: charges.get(int(j["id"]))} for j in shown]
    if as_json:
        import json

        sys.stdout.write(json.dumps({"jobs": shown}, indent=2) + "\n")
        return 0
    mode = "plain" if parsable2 else "trailing" if parsable else None
    sys.stdout.write(format_jobs(shown, parsed, header=not noheader, parsable=mode))
    return 0
