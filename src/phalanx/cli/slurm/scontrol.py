"""``phalanx scontrol``: show job/node/partition/hostnames/hostlist, hold, release, requeue, update.

``show job`` prints Slurm's ``Key=Value`` layout (first line ``JobId=N
JobName=...``, continuation lines indented three spaces, a blank line after
each job; ``-o`` puts each record on one line). Only keys phalanx knows are
printed with values; keys Slurm has and phalanx does not are left out rather
than invented. ``show hostnames``/``show hostlist`` run locally, no server.
"""

from __future__ import annotations

import sys

from phalanx.cli.slurm.common import (
    HET_MAX_COMPONENTS,
    compress_hostlist,
    elapsed,
    expand_hostlist,
    het_rows,
    het_selected,
    mark_unavailable_nodes,
    parse_job_ref,
    reason_of,
    secs2time,
    slurm_state,
    slurm_time,
    tool_error,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    Record = list[list[str]]
    """Lines of ``Key=Value`` items."""

__all__ = [
    "job_record",
    "node_record",
    "node_state_text",
    "partition_record",
    "reason_text",
    "render",
    "run",
]


def _null(value: Any) -> str:
    return "(null)" if value in (None, "") else str(value)


def _user(name: str) -> str:
    try:
        import pwd

        return f"{name}({pwd.getpwnam(name).pw_uid})"
    except (KeyError, ImportError):
        return f"{name}(N/A)"


def job_record(job: dict[str, Any], now: float | None = None) -> Record:
    """``scontrol show job`` lines for one job view."""
    state = slurm_state(job)
    first = [f"JobId={job['id']}"]
    if job.get("array_job_id") is not None:
        first.append(f"ArrayJobId={job['array_job_id']}")
        task = job.get("array_task_id")
        first.append(f"ArrayTaskId={task if task is not None else job.get('array_spec') or ''}")
    elif job.get("het_job_offset") is not None:
        first += [f"HetJobId={job['het_job_id']}", f"HetJobOffset={job['het_job_offset']}"]
    first.append(f"JobName={job.get('name') or ''}")
    code = job.get("exit_code")
    sig = job.get("signal")
    exit_code = f"0:{sig}" if sig else f"{int(code or 0) & 0xFF}:0"
    nodes = compress_hostlist(job.get("nodes") or [])
    num_nodes = job.get("num_nodes") or len(job.get("nodes") or []) or 1
    account = job.get("account") or job.get("tenant") or ""
    qos = job.get("qos") or job.get("priority_class") or "normal"
    start = job.get("start_time") or job.get("estimated_start")
    het_set: list[str] = []
    if job.get("het_job_offset") is not None:
        leader = int(job["het_job_id"])
        last = leader + int(job.get("het_job_size") or 1) - 1
        het_set = [f"HetJobIdSet={leader}-{last}" if last > leader else f"HetJobIdSet={leader}"]
    return [
        first,
        het_set,
        [f"UserId={_user(str(job.get('user') or ''))}"],
        [
            f"Priority={job.get('priority') if job.get('priority') is not None else 0}",
            f"Nice={job.get('nice') or 0}",
            f"Account={account}",
            f"QOS={qos}",
        ],
        [
            f"JobState={state}",
            # A description's spaces are underscores there (Reason=ReqNodeNotAvail,_...).
            f"Reason={reason_of(job).replace(' ', '_')}",
            f"Dependency={_null(job.get('dependency'))}",
        ],
        [
            f"Requeue={1 if job.get('requeue', True) else 0}",
            f"Restarts={max(0, int(job.get('attempt') or 1) - 1)}",
            "BatchFlag=1",
            f"ExitCode={exit_code}",
        ],
        [
            f"RunTime={secs2time(elapsed(job, now))}",
            f"TimeLimit={secs2time(job.get('time_limit'))}",
        ],
        [f"SubmitTime={slurm_time(job.get('submit_time'), 'Unknown')}"],
        [
            f"StartTime={slurm_time(start, 'Unknown')}",
            f"EndTime={slurm_time(job.get('end_time'), 'Unknown')}",
        ],
        [f"Partition={job.get('partition') or job.get('cluster_queue') or ''}"],
        [f"NodeList={_null(nodes)}"],
        [
            f"NumNodes={num_nodes}",
            f"NumCPUs={job.get('num_cpus') or ''}",
            f"NumTasks={job.get('num_tasks') or ''}",
        ],
        [f"TresPerJob=gres/gpu:{job['gpus']}"] if job.get("gpus") else [],
        [f"Command={' '.join(job.get('command') or []) or '(null)'}"],
        [f"WorkDir={job.get('working_dir') or ''}"],
        [f"Comment={job['comment']}"] if job.get("comment") else [],
        [f"StdErr={job.get('stderr') or ''}"],
        ["StdIn=/dev/null"],
        [f"StdOut={job.get('stdout') or ''}"],
    ]


def _mem_mb(text: str) -> str:
    from phalanx.cli.slurm.sinfo import _mem_mb

    return _mem_mb({"status": {"capacity": {"memory": text}}})


def node_record(node: dict[str, Any], partitions: Sequence[str]) -> Record:
    name = node["metadata"]["name"]
    status = node.get("status") or {}
    capacity = status.get("capacity") or {}
    gpus = capacity.get("nvidia.com/gpu")
    state = node_state_text(status)
    labels = node["metadata"].get("labels") or {}
    features = ",".join(f"{k}={v}" for k, v in labels.items()) or "(null)"
    return [
        [f"NodeName={name}"],
        [f"CPUTot={capacity.get('cpu', '')}"],
        [f"AvailableFeatures={features}"],
        [f"Gres={f'gpu:{gpus}' if gpus else '(null)'}"],
        [f"NodeAddr={name}", f"NodeHostName={name}"],
        [f"RealMemory={_mem_mb(str(capacity.get('memory', '0')))}"],
        [f"State={state}"],
        [f"Partitions={','.join(partitions)}"],
        [f"AllocTRES=gres/gpu={status.get('gpus_used', 0)}"] if gpus else [],
        [f"Reason={reason_text(status)}"] if status.get("reason") else [],
    ]


def node_state_text(status: dict[str, Any]) -> str:
    """``State=`` of ``scontrol show node``: ``IDLE``, ``MIXED``, ``ALLOCATED``, ``DOWN``,
    and a drained node's use with ``+DRAIN`` (``IDLE+DRAIN``, ``MIXED+DRAIN``)."""
    state = str(status.get("state") or "idle")
    if state in ("drain", "draining"):
        return f"{str(status.get('alloc_state') or 'idle').upper()}+DRAIN"
    return state.upper()


def reason_text(status: dict[str, Any]) -> str:
    """``Reason=`` of ``scontrol show node``: ``why [user@YYYY-MM-DDTHH:MM:SS]``."""
    import time

    reason = str(status.get("reason") or "")
    user = str(status.get("reason_user") or "") or "Unknown"
    when = status.get("reason_time")
    if when is None:
        return f"{reason} [{user}@Unknown]"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(when)))
    return f"{reason} [{user}@{stamp}]"


def partition_record(cq: dict[str, Any], nodes: Sequence[dict[str, Any]]) -> Record:
    import contextlib

    status = cq.get("status") or {}
    names = [n["metadata"]["name"] for n in nodes]
    cpus = 0
    for node in nodes:
        with contextlib.suppress(ValueError):
            cpus += int(((node.get("status") or {}).get("capacity") or {}).get("cpu", 0))
    return [
        [f"PartitionName={cq['metadata']['name']}"],
        ["AllowGroups=ALL", "AllowAccounts=ALL", "AllowQos=ALL"],
        ["MaxNodes=UNLIMITED", "MaxTime=UNLIMITED", "MinNodes=0"],
        [f"Nodes={_null(compress_hostlist(names))}"],
        [
            f"State={'UP' if status.get('active', True) else 'INACTIVE'}",
            f"TotalCPUs={cpus}",
            f"TotalNodes={len(names)}",
        ],
    ]


def render(record: Record, *, oneliner: bool = False) -> str:
    lines = [" ".join(items) for items in record if items]
    if oneliner:
        return " ".join(lines) + "\n"
    return lines[0] + "\n" + "".join(f"   {line}\n" for line in lines[1:]) + "\n"


_UPDATE_KEYS = {"timelimit": "time_limit", "nice": "nice", "comment": "comment"}


def _jobs_named(client: Any, text: str) -> list[dict[str, Any]] | None:
    """The views of the jobs ``12,13_[1-2]`` names; ``None`` if a part names none."""
    from phalanx.cli.slurm.common import resolve

    views: list[dict[str, Any]] = []
    for part in text.split(","):
        ref = parse_job_ref(part)
        if ref is None:
            return None
        found = resolve(client, ref)
        if not found:
            return None
        views += found
    return views


def _job_ids(client: Any, text: str) -> list[int] | None:
    views = _jobs_named(client, text)
    return None if views is None else [int(j["id"]) for j in views]


def run(args: Sequence[str], *, oneliner: bool, details: bool) -> int:
    """``scontrol COMMAND ...``; returns the exit status."""
    from phalanx.errors import Invalid, NotFound, PhalanxError

    if not args:
        tool_error("scontrol", "no command given (show, hold, release, requeue, update)")
        return 1
    command, rest = args[0].lower(), list(args[1:])
    if command == "show":
        if not rest:
            tool_error("scontrol", "show: entity not specified")
            return 1
        entity = rest[0].lower()
        if entity in ("hostnames", "hostname", "hostlist", "hostlistsorted"):
            # The same answer as inside a job, where no server is needed.
            from phalanx.runtime.scontrol import answer_locally

            code = answer_locally(["show", entity, *rest[1:]])
            return code if code is not None else 1
    from phalanx.client import Client

    try:
        with Client() as client:
            if command == "show":
                return _show(client, rest, oneliner=oneliner)
            if command in ("hold", "uhold", "release", "requeue", "requeuehold"):
                if not rest:
                    tool_error("scontrol", f"{command}: job id not specified")
                    return 1
                status = 0
                for text in rest:
                    ids = _job_ids(client, text)
                    if ids is None:
                        sys.stderr.write(f"Invalid job id specified for job {text}\n")
                        status = 1
                        continue
                    for job_id in ids:
                        try:
                            if command in ("hold", "uhold"):
                                client.hold(job_id)
                            elif command == "release":
                                client.release(job_id)
                            else:
                                client.requeue(job_id, hold=command == "requeuehold")
                        except PhalanxError as exc:
                            sys.stderr.write(f"{_slurm_error(exc)} for job {job_id}\n")
                            status = 1
                return status
            if command == "update":
                return _update(client, rest)
    except NotFound as exc:
        sys.stderr.write(f"{exc.detail}\n")
        return 1
    except Invalid as exc:
        tool_error("scontrol", exc.detail)
        return 1
    except PhalanxError as exc:
        tool_error("scontrol", exc.detail)
        return 1
    sys.stderr.write(f"invalid keyword: {args[0]}\n")
    return 1


def _het_leaders(client: Any, text: str) -> list[dict[str, Any]]:
    """The heterogeneous jobs whose components ``text`` names by their own ids (``13``
    for ``12+1``): the job before the id (components take the ids after their job's)."""
    from phalanx.errors import NotFound

    found: list[dict[str, Any]] = []
    for part in text.split(","):
        ref = parse_job_ref(part)
        if ref is None or ref.tasks is not None or ref.het_offset is not None:
            return []
        for back in range(1, min(ref.job_id, HET_MAX_COMPONENTS)):
            try:
                job = client.get(ref.job_id - back)
            except NotFound:
                continue
            ids = {int(c["id"]) for c in job.get("het_components") or []}
            if ref.job_id not in ids:
                return []
            found.append(job)
            break
        else:
            return []
    return found


def _slurm_error(exc: Exception) -> str:
    from phalanx import errors

    if isinstance(exc, errors.NotFound):
        return "Invalid job id specified"
    if isinstance(exc, errors.Conflict):
        return "Job is no longer pending execution"
    if isinstance(exc, errors.Forbidden | errors.Unauthorized):
        return "Access/permission denied"
    return str(getattr(exc, "detail", exc))


def _show(client: Any, rest: list[str], *, oneliner: bool) -> int:
    from phalanx.cli.slurm.sinfo import partition_nodes
    from phalanx.errors import NotFound

    entity = rest[0].lower()
    target = rest[1] if len(rest) > 1 else None
    if entity in ("job", "jobs"):
        if target is None:
            jobs = list(client.jobs())
        else:
            # The views that named the jobs are the jobs: no second request for each.
            named = _jobs_named(client, target)
            if named is None:
                # A heterogeneous job's component by its own id (the job's + N)?
                named = _het_leaders(client, target) or None
            if named is None:
                sys.stderr.write("slurm_load_jobs error: Invalid job id specified\n")
                return 1
            jobs = named
        mark_unavailable_nodes(client, jobs)
        # A heterogeneous job: a record per component (JobId=13 HetJobId=12 HetJobOffset=1).
        refs = [r for r in map(parse_job_ref, (target or "").split(",")) if r is not None]
        jobs = [
            row
            for job in jobs
            for row in het_rows(job)
            if target is None or het_selected(row, refs, whole=False)
        ]
        if not jobs:
            sys.stdout.write("No jobs in the system\n")
        for job in jobs:
            sys.stdout.write(render(job_record(job), oneliner=oneliner))
        return 0
    if entity in ("node", "nodes", "partition", "partitions"):
        cqs = client.cluster_queues()
        flavors = {f["metadata"]["name"]: f for f in client.resource_flavors()}
        nodes = client.nodes()
        members = {cq["metadata"]["name"]: partition_nodes(cq, flavors, nodes) for cq in cqs}
        if entity.startswith("node"):
            chosen = nodes
            if target is not None:
                wanted = set(expand_hostlist(target))
                chosen = [n for n in nodes if n["metadata"]["name"] in wanted]
                if not chosen:
                    sys.stderr.write(f"Node {target} not found\n")
                    return 1
            for node in chosen:
                name = node["metadata"]["name"]
                parts = [
                    p for p, ns in members.items() if any(n["metadata"]["name"] == name for n in ns)
                ]
                sys.stdout.write(render(node_record(node, parts), oneliner=oneliner))
            return 0
        chosen_cqs = [c for c in cqs if target is None or c["metadata"]["name"] == target]
        if not chosen_cqs:
            sys.stderr.write(f"Partition {target} not found\n")
            return 1
        for cq in chosen_cqs:
            sys.stdout.write(
                render(partition_record(cq, members[cq["metadata"]["name"]]), oneliner=oneliner)
            )
        return 0
    raise NotFound(f"invalid entity: {rest[0]} for keyword: show")


def _update(client: Any, rest: list[str]) -> int:
    from phalanx.errors import PhalanxError
    from phalanx.timefmt import parse_time_limit

    pairs: dict[str, str] = {}
    for item in rest:
        key, sep, value = item.partition("=")
        if not sep:
            sys.stderr.write(f"Invalid input: {item}\nRequest aborted\n")
            return 1
        pairs[key.lower()] = value
    node_key = next((k for k in pairs if _abbreviates(k, "nodename", 3)), None)
    if node_key is not None:
        return _update_nodes(client, pairs.pop(node_key), pairs)
    target = pairs.pop("jobid", None) or pairs.pop("job", None)
    if target is None:
        sys.stderr.write(
            "No valid entity in update command\n"
            'Input line must include "NodeName", "PartitionName", "Reservation", "JobId", '
            'or "SlurmctldDebug"\n'
        )
        return 1
    fields: dict[str, Any] = {}
    for key, value in pairs.items():
        name = _UPDATE_KEYS.get(key)
        if name is None:
            sys.stderr.write(
                f"Update of this parameter is not supported: {key}=\nRequest aborted\n"
            )
            return 1
        if name == "time_limit":
            fields[name] = parse_time_limit(value)
        elif name == "nice":
            try:
                fields[name] = int(value)
            except ValueError:
                sys.stderr.write(f"Invalid nice value: {value}\nRequest aborted\n")
                return 1
        else:
            fields[name] = value
    ids = _job_ids(client, target)
    if ids is None:
        sys.stderr.write(f"Invalid job id specified for job {target}\n")
        return 1
    status = 0
    for job_id in ids:
        try:
            client.update(job_id, **fields)
        except PhalanxError as exc:
            sys.stderr.write(f"{_slurm_error(exc)} for job {job_id}\n")
            status = 1
    return status


_NODE_STATES = ("drain", "resume", "undrain", "down", "idle")
"""The states phalanx sets, in the order Slurm matches them (any prefix of 3 letters or
more, in any case: ``State=dra``)."""


def _abbreviates(text: str, word: str, least: int) -> bool:
    """Whether ``text`` names ``word`` as Slurm's parsers accept it: case aside, a prefix
    of at least ``least`` letters (``xstrncasecmp(text, word, MAX(len, least))``)."""
    text = text.lower()
    return len(text) >= least and word.startswith(text)


_BAD_STATE = (
    "Invalid input: State={state}\n"
    "Request aborted\n"
    "Valid states are: NoResp DRAIN FAIL FUTURE RESUME POWER_DOWN POWER_UP UNDRAIN\n"
    "Not all states are valid given a node's prior state\n"
)


def _update_nodes(client: Any, hostlist: str, pairs: dict[str, str]) -> int:
    """``scontrol update NodeName=HOSTLIST State=... Reason=...``, with Slurm's messages
    and exit status 1 for each refusal; every node changes, or none."""
    from phalanx import errors

    # Slurm's update_node.c: any prefix names State and Reason ("s=", "rea=").
    state_key = next((k for k in pairs if _abbreviates(k, "state", 1)), None)
    state_text = pairs.pop(state_key) if state_key is not None else None
    reason_key = next((k for k in pairs if _abbreviates(k, "reason", 1)), None)
    reason = pairs.pop(reason_key) if reason_key is not None else ""
    if pairs:
        key = next(iter(pairs))
        sys.stderr.write(f"Update of this parameter is not supported: {key}=\nRequest aborted\n")
        return 1
    state = ""
    if state_text is not None:
        found = next((n for n in _NODE_STATES if _abbreviates(state_text, n, 3)), None)
        if found is None:
            sys.stderr.write(_BAD_STATE.format(state=state_text))
            return 1
        state = found
    if state in ("drain", "down") and not reason:
        sys.stderr.write(
            "You must specify a reason when DOWNING or DRAINING a node. Request denied\n"
        )
        return 1
    try:
        names = expand_hostlist(hostlist) if hostlist.strip() else []
    except ValueError:
        names = []
    if not names:
        sys.stderr.write("slurm_update error: Invalid node name specified\n")
        return 1
    if state == "" and not reason:
        return 0  # nothing to change, as Slurm answers it
    try:
        client.update_nodes(names, state, reason)
    except errors.NotFound:
        sys.stderr.write("slurm_update error: Invalid node name specified\n")
        return 1
    except (errors.Forbidden, errors.Unauthorized):
        sys.stderr.write("slurm_update error: Invalid user id\n")
        return 1
    except errors.Conflict:
        sys.stderr.write("slurm_update error: Invalid node state specified\n")
        return 1
    return 0
