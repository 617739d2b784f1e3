"""The answer to "why is my job pending?" (``GET /api/v1/jobs/{id}/explain``), and its plain words.

:func:`explain_answer` puts together what the engine knows about a job now
(:func:`phalanx.engine.explain.report.explain_job`), why the control plane still holds
it back (hold, begin time, dependency, array throttle) and what its stored
events say happened to it (admitted where and how, preempted by whom,
requeued, ended). :func:`explain_text` words the answer in a few short
sentences. Both are pure: the caller passes the clock's ``now``.

The answer's keys (times RFC 3339 UTC; quota amounts in base units: counts as
they are, ``cpu`` in millicores, ``memory`` in bytes):

``id``, ``name``, ``state``, ``tenant``, ``user``, ``queue``, ``cluster_queue``,
``flavor``, ``nodes``, ``submit_time``, ``start_time``, ``end_time``, ``exit_code``
    the job as stored;
``scheduler``
    ``pending`` (queued in its ClusterQueue), ``waiting`` (pending without a
    ClusterQueue to queue in), ``held`` (not yet eligible), ``admitted``, or
    ``null`` when the scheduler no longer knows the job (it has ended);
``reason``
    ``{"code", "message", "details", "slurm"}`` or ``null``;
``priority``
    ``{"total", "factors"}``;
``position``
    ``{"queue": {"rank", "of"} | null, "cluster": {"rank", "of"} | null}``;
``quota``
    per flavor and resource of its ClusterQueue: ``requested``, ``nominal``,
    ``usage``, ``borrowed``, ``borrowing_limit``, ``lending_limit``, ``free``,
    ``available``, ``cohort``, ``cohort_available``, ``from_cohort``,
    ``potential``, ``reserved``, ``short_by``, ``short_in``, ``limit``, ``never_fits``;
``gang``
    for a gang whose quota fits but whose nodes don't: ``tasks_needed``,
    ``tasks_fit``, ``per_task``, ``nodes``, ``schedulable``, ``idle``, ``free``, ...;
``ahead``, ``blocked_by``
    the first jobs ahead of it in its ClusterQueue (``{"id", "priority",
    "cluster_queue"}``), the head blocking a StrictFIFO queue;
``reservation_ahead``, ``reservation``, ``estimated_start``
    the backfill plan: the reservation of a job ahead of it on its flavors'
    nodes, its own reservation, its expected start;
``admission``
    where an admitted job runs: ``cluster_queue``, ``flavors``, ``nodes``,
    ``borrowing``, ``usage``, ``admitted_at``, ``evicting``, ``evicted_for``;
``last_admission``, ``preemptions``, ``requeues``, ``history``
    from the stored events;
``text``
    the plain-words rendering.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phalanx.engine.explain.report import Explanation
    from phalanx.store.records import JobEventRow, JobRow

__all__ = ["explain_answer", "explain_text"]

_HISTORY = frozenset(
    {
        "Submitted",
        "Admitted",
        "Started",
        "Checkpointed",
        "Evicting",
        "NodeReplaced",
        "Preempted",
        "Requeued",
        "RequeueRequested",
        "Deactivated",
        "Finished",
        "Cancelled",
    }
)
_FACTOR_WORDS = {
    "age": "age",
    "fairshare": "fair-share",
    "fair_share": "fair-share",
    "share": "fair-share",
    "jobsize": "job size",
    "job_size": "job size",
    "size": "job size",
    "qos": "QOS",
    "partition": "partition",
    "assoc": "association",
    "nice": "nice",
    "tres": "TRES",
    "site": "site",
}
_PREEMPTION_WORDS = {
    "InClusterQueue": "priority within the ClusterQueue",
    "InCohortReclamation": "reclamation of lent quota in the cohort",
    "InCohortFairSharing": "fair sharing in the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation in the cohort while borrowing",
}
_FINISHED = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY"}
)


def _stamp(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# --------------------------------------------------------------------------- the answer


def explain_answer(
    row: JobRow,
    explanation: Explanation | None,
    gate: tuple[str, str] | None,
    events: Sequence[JobEventRow],
    now: float,
) -> dict[str, Any]:
    """The explain answer for ``row`` (see the module docstring), with its ``text``.

    ``gate`` is ``(reason, message)`` while the control plane holds the job back.
    """
    from phalanx.dialects.slurm.reasons import slurm_reason

    engine = explanation.to_dict() if explanation is not None else None
    scheduler: str | None = None
    reason: dict[str, Any] | None = None
    if engine is not None:
        scheduler = engine["state"]
        reason = engine["reason"]
    elif gate is not None:
        scheduler = "held"
        reason = {"code": gate[0], "message": gate[1], "details": {}}
    elif row.reason:
        reason = {"code": row.reason, "message": row.message, "details": {}}
    if reason is not None:
        reason["slurm"] = slurm_reason(row.state, reason["code"])
    answer: dict[str, Any] = {
        "id": row.id,
        "name": row.name,
        "state": row.state,
        "tenant": row.tenant,
        "user": row.user,
        "queue": row.queue,
        "cluster_queue": (engine or {}).get("cluster_queue") or row.cluster_queue,
        "flavor": row.flavor,
        "nodes": list(row.nodes),
        "submit_time": _stamp(row.submit_time),
        "start_time": _stamp(row.start_time),
        "end_time": _stamp(row.end_time),
        "exit_code": row.exit_code,
        "scheduler": scheduler,
        "reason": reason,
        "priority": engine["priority"]
        if engine is not None
        else {"total": row.priority, "factors": None},
        "position": engine["position"] if engine is not None else {"queue": None, "cluster": None},
        "quota": engine["quota"] if engine is not None else [],
        "gang": engine["gang"] if engine is not None else None,
        "ahead": engine["ahead"] if engine is not None else [],
        "blocked_by": engine["blocked_by"] if engine is not None else None,
        "reservation_ahead": _dated(engine["reservation_ahead"], "start") if engine else None,
        "reservation": _dated(engine["reservation"], "start") if engine else None,
        "estimated_start": _stamp(engine["estimated_start"]) if engine else None,
        "no_estimate": engine.get("no_estimate") if engine else None,
        "admission": _dated(engine["admission"], "admitted_at") if engine else None,
    }
    answer.update(_from_events(events))
    answer["text"] = explain_text(answer, now)
    return answer


def _dated(facts: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if facts is None:
        return None
    return {**facts, key: _stamp(facts[key])}


def _from_events(events: Sequence[JobEventRow]) -> dict[str, Any]:
    last_admission: dict[str, Any] | None = None
    last_checkpoint: dict[str, Any] | None = None
    preemptions: list[dict[str, Any]] = []
    requeues: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    for event in events:
        if event.kind not in _HISTORY:
            continue
        data = dict(event.data)
        history.append(
            {
                "time": _stamp(event.time),
                "kind": event.kind,
                "reason": event.reason,
                "message": event.message,
                "data": data,
            }
        )
        if event.kind == "Admitted":
            last_admission = {
                "time": _stamp(event.time),
                "cluster_queue": data.get("cluster_queue"),
                "flavor": data.get("flavor"),
                "nodes": list(data.get("nodes") or []),
                "borrowing": bool(data.get("borrowing")),
                "attempt": data.get("attempt"),
            }
        elif event.kind == "Checkpointed":
            last_checkpoint = {"time": _stamp(event.time), "attempt": data.get("attempt")}
        elif event.kind == "Evicting":
            if data.get("preemptor") is not None or event.reason == "Preempted":
                preemption = {
                    "time": _stamp(event.time),
                    "by": data.get("preemptor"),
                    "reason": data.get("preemption_reason"),
                    "message": event.message,
                }
                if data.get("lost_gpu_hours") is not None:
                    preemption["lost_gpu_hours"] = data["lost_gpu_hours"]
                    preemption["spared"] = data.get("spared") or []
                preemptions.append(preemption)
        elif event.kind == "Requeued":
            requeues.append({"time": _stamp(event.time), "reason": event.reason})
    return {
        "last_admission": last_admission,
        "last_checkpoint": last_checkpoint,
        "preemptions": preemptions,
        "requeues": requeues,
        "history": history,
    }


# --------------------------------------------------------------------------- plain words


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _number(value: Any) -> str:
    if value is None:
        return "?"
    number = float(value)
    if number == int(number):
        return str(int(number))
    return f"{number:.2f}".rstrip("0").rstrip(".")


def _amount(amount: int, resource: str) -> str:
    from phalanx.model.quantity import format_quantity

    return format_quantity(int(amount), resource)


def _nodes(names: Sequence[str]) -> str:
    if not names:
        return "no nodes"
    from phalanx.dialects.slurm.environment import node_list

    return node_list(list(names))


def _when(stamp: str | None, now: float) -> str:
    """``14:05`` today (UTC), else the full time."""
    t = _epoch(stamp)
    if t is None or stamp is None:
        return "?"
    day = datetime.fromtimestamp(now, UTC).date()
    moment = datetime.fromtimestamp(t, UTC)
    return moment.strftime("%H:%M UTC") if moment.date() == day else stamp


def _relative(stamp: str | None, now: float) -> str:
    t = _epoch(stamp)
    if t is None:
        return ""
    seconds = t - now
    if abs(seconds) < 60:
        return "now"
    minutes = int(abs(seconds) // 60)
    if minutes < 60:
        span = f"{minutes} min"
    elif minutes < 48 * 60:
        span = f"{minutes // 60} h {minutes % 60} min" if minutes % 60 else f"{minutes // 60} h"
    else:
        span = f"{minutes // 1440} days"
    return f"in {span}" if seconds > 0 else f"{span} ago"


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def _job(entry: Mapping[str, Any]) -> str:
    return f"job {entry['id']} (priority {_number(entry.get('priority'))})"


def _priority(priority: Mapping[str, Any]) -> str:
    total = priority.get("total")
    if total is None:
        return ""
    factors = priority.get("factors") or {}
    terms = [(name, value) for name, value in factors.items() if value]
    if not terms or [name for name, _ in terms] == ["priority"]:
        # Kueue's order: the priority value is the whole priority.
        return f"Priority {_number(total)}."
    parts = []
    for i, (name, value) in enumerate(terms):
        word = _FACTOR_WORDS.get(name.lower(), name.replace("_", " "))
        sign = "-" if value < 0 else "+"
        shown = f"{word} {_number(abs(value))}"
        parts.append(shown if i == 0 and sign == "+" else f"{sign} {shown}")
    return f"Priority {_number(total)} = {' '.join(parts)}."


def _quota_sentence(line: Mapping[str, Any], cluster_queue: str) -> str:
    resource = line["resource"]
    need = f"{_amount(line['requested'], resource)} {resource} in flavor {line['flavor']}"
    if line.get("never_fits"):
        return (
            f"It needs {need}, more than the {_amount(line['potential'], resource)} "
            f"ClusterQueue {cluster_queue} could ever get, even from an idle cohort: "
            "it cannot start until the quota grows."
        )
    free, nominal = _amount(line["free"], resource), _amount(line["nominal"], resource)
    text = f"It needs {need}; ClusterQueue {cluster_queue} has {free} free of its nominal {nominal}"
    if line.get("reserved"):
        text += f" ({_amount(line['reserved'], resource)} of it held for reservations)"
    if line.get("borrowed"):
        text += f" (it already borrows {_amount(line['borrowed'], resource)})"
    cohort = line.get("cohort")
    if cohort is not None:
        lends = line.get("from_cohort") or 0
        text += f" and cohort {cohort} lends " + (_amount(lends, resource) if lends else "none")
    text += f": {_amount(line['short_by'], resource)} short"
    if line.get("limit") == "borrowingLimit":
        limit = line.get("borrowing_limit")
        owner = str(line.get("short_in") or "").replace("/", " ")
        shown = f" of {_amount(limit, resource)}" if limit is not None else ""
        text += f" ({owner} has reached its borrowingLimit{shown})"
    return text + "."


def _gang_sentence(gang: Mapping[str, Any]) -> str:
    per = ", ".join(f"{_amount(a, r)} {r}" for r, a in (gang.get("per_task") or {}).items())
    per = per or "no resources"
    needed, fit = gang["tasks_needed"], gang["tasks_fit"]
    if needed == 1:
        text = (
            f"Its quota fits in flavor {gang['flavor']}, but its task ({per}) "
            "fits on none of the flavor's nodes now"
        )
    else:
        text = (
            f"Its quota fits in flavor {gang['flavor']}, but not its gang: {needed} tasks of "
            f"{per} must start together and at most {fit} fit on the nodes now"
        )
    free = ", ".join(f"{_amount(a, r)} {r}" for r, a in (gang.get("free") or {}).items())
    if free:
        text += (
            f" ({free} free on {gang['schedulable']} of {gang['nodes']} nodes, {gang['idle']} idle)"
        )
    if gang.get("topology"):
        text += f"; tasks are packed within topology {gang['topology']}"
    return text + "."


def _other_flavor_sentence(line: Mapping[str, Any]) -> str:
    resource = line["resource"]
    if line.get("never_fits"):
        return (
            f"Flavor {line['flavor']} could never hold it either: at most "
            f"{_amount(line['potential'], resource)} {resource}."
        )
    where = str(line.get("short_in") or "").replace("/", " ")
    return (
        f"Flavor {line['flavor']} is short of quota: {_amount(line['short_by'], resource)} "
        f"{resource} (in {where})."
    )


def _pending_lines(answer: Mapping[str, Any], now: float) -> list[str]:
    lines: list[str] = []
    reason = answer.get("reason") or {}
    details = reason.get("details") or {}
    code = reason.get("code") or ""
    cq = answer.get("cluster_queue") or "?"
    shortages = [line for line in answer.get("quota") or [] if line.get("short_by")]
    gang = answer.get("gang")
    if code in ("InsufficientQuota", "ExceedsMaxQuota") and shortages:
        lines.append(_quota_sentence(shortages[0], cq))
        lines.extend(_other_flavor_sentence(other) for other in shortages[1:3])
    elif gang is not None:
        lines.append(_gang_sentence(gang))
        lines.extend(_other_flavor_sentence(other) for other in shortages[:2])
    elif answer.get("blocked_by") is not None:
        head = answer["blocked_by"]
        lines.append(
            f"It waits behind {_job(head)}, the blocked head of ClusterQueue {cq}: "
            + (reason.get("message") or "")
        )
        lines[-1] = _sentence(lines[-1])
    elif code == "PendingPreemption" and details.get("victims"):
        victims = ", ".join(str(v) for v in details["victims"])
        lines.append(
            f"It has preempted job(s) {victims} and starts once they have given back "
            "the quota and nodes it needs."
        )
        for victim, lost in (details.get("lostWork") or {}).items():
            lines.append(
                _lost_sentence(
                    f"It preempted job {victim}", lost.get("gpuHours"), lost.get("rather")
                )
            )
    elif code == "Priority":
        if not answer.get("ahead"):
            lines.append("It is next in line: the next scheduling cycle tries it.")
    elif reason:
        message = reason.get("message") or ""
        lines.append(_sentence(f"{code}: {message}" if message else code))
    extra = {k: v for k, v in details.items() if k not in _KNOWN_DETAILS}
    if extra and code not in ("InsufficientQuota", "ExceedsMaxQuota", "NoNodeFit"):
        lines.append("Details: " + ", ".join(f"{k}={v}" for k, v in extra.items()) + ".")
    ahead = answer.get("ahead") or []
    position = (answer.get("position") or {}).get("queue") or {}
    if ahead and not answer.get("blocked_by"):
        more = max(0, int(position.get("rank", 1)) - 1 - len(ahead))
        listed = ", ".join(_job(j) for j in ahead)
        lines.append(
            f"Ahead of it in ClusterQueue {cq}: {listed}" + (f" and {more} more." if more else ".")
        )
    reservation = answer.get("reservation_ahead")
    if reservation is not None:
        lines.append(
            f"Job {reservation['job_id']} (priority {_number(reservation.get('priority'))}) "
            f"holds a reservation on {_nodes(reservation['nodes'])} from "
            f"{_when(reservation['start'], now)}."
        )
    own = answer.get("reservation")
    if own is not None:
        lines.append(
            f"Nodes {_nodes(own['nodes'])} are reserved for it from {_when(own['start'], now)}."
        )
    estimate = answer.get("estimated_start")
    if estimate is not None:
        lines.append(f"Expected to start at {estimate} ({_relative(estimate, now)}).")
    elif not any(line.get("never_fits") for line in shortages):
        why = answer.get("no_estimate")
        lines.append(
            f"No start time can be estimated: {why}."
            if why
            else "No start time can be estimated yet."
        )
    return lines


_KNOWN_DETAILS = frozenset(
    {
        "clusterQueue",
        "podSet",
        "flavor",
        "resource",
        "shortBy",
        "shortIn",
        "maxTasks",
        "blockedBy",
        "localQueue",
        "victims",
        "lostWork",
    }
)


def _lost_sentence(subject: str, hours: Any, rather: Any) -> str:
    """``... (lost 0.4 GPU-h since its checkpoint) rather than job 9 (3.1 GPU-h).``"""
    text = f"{subject} (lost {hours} GPU-h since its checkpoint)"
    items = rather.items() if isinstance(rather, Mapping) else (rather or [])
    others = ", ".join(f"job {j} ({h} GPU-h)" for j, h in items)
    if others:
        text += f" rather than {others}"
    return text + "."


def _history_lines(answer: Mapping[str, Any], now: float) -> list[str]:
    lines: list[str] = []
    for p in answer.get("preemptions") or []:
        why = _PREEMPTION_WORDS.get(p.get("reason") or "", "")
        by = f" by job {p['by']}" if p.get("by") is not None else ""
        lines.append(
            f"It was preempted{by} at {_when(p['time'], now)}" + (f" ({why})." if why else ".")
        )
        if p.get("lost_gpu_hours") is not None:
            lines.append(
                _lost_sentence("It was chosen", p["lost_gpu_hours"], p.get("spared") or [])
            )
    requeues = answer.get("requeues") or []
    if requeues:
        last = requeues[-1]
        times = "once" if len(requeues) == 1 else f"{len(requeues)} times"
        lines.append(
            f"It was requeued {times} (last at {_when(last['time'], now)}: {last['reason']})."
        )
    return lines


def _admitted_lines(answer: Mapping[str, Any], now: float) -> list[str]:
    state = answer.get("state") or ""
    adm = answer.get("admission") or {}
    last = answer.get("last_admission") or {}
    cq = adm.get("cluster_queue") or last.get("cluster_queue") or answer.get("cluster_queue")
    nodes = adm.get("nodes") or answer.get("nodes") or last.get("nodes") or []
    flavors = sorted({f for per in (adm.get("flavors") or {}).values() for f in per.values()}) or (
        [answer["flavor"]] if answer.get("flavor") else []
    )
    verb = {"RUNNING": "is running", "COMPLETING": "is completing"}.get(state, "is admitted")
    text = f"Job {answer['id']} {verb} in ClusterQueue {cq} on {_nodes(nodes)}"
    if flavors:
        text += f" (flavor {', '.join(flavors)})"
    if state == "RUNNING" and answer.get("start_time"):
        text += f", since {_when(answer['start_time'], now)}"
    lines = [text + "."]
    admitted_at = adm.get("admitted_at") or last.get("time")
    borrowing = adm.get("borrowing", last.get("borrowing"))
    total = (answer.get("priority") or {}).get("total")
    when = f"It was admitted at {_when(admitted_at, now)}" if admitted_at else "It was admitted"
    if total is not None:
        when += f" with priority {_number(total)}"
    lines.append(when + _terms(borrowing, cq))
    checkpoint = answer.get("last_checkpoint")
    if checkpoint and checkpoint.get("attempt") in (None, last.get("attempt")):
        lines.append(f"It last reported a checkpoint at {_when(checkpoint['time'], now)}.")
    if adm.get("evicting"):
        lines.append(f"It is being evicted ({adm.get('evicted_for') or 'requested'}).")
    return lines


def _terms(borrowing: bool | None, cq: str | None) -> str:
    if borrowing:
        return f", borrowing quota beyond ClusterQueue {cq}'s nominal quota from its cohort."
    if borrowing is None:
        return "."
    return f", within ClusterQueue {cq}'s nominal quota."


def _finished_lines(answer: Mapping[str, Any], now: float) -> list[str]:
    state = answer.get("state")
    last = answer.get("last_admission") or {}
    text = f"Job {answer['id']} ended {state}"
    if answer.get("end_time"):
        text += f" at {_when(answer['end_time'], now)}"
    if answer.get("exit_code") is not None:
        text += f" (exit code {answer['exit_code']})"
    lines = [text + "."]
    if last:
        where = f"It last ran in ClusterQueue {last.get('cluster_queue')}"
        if answer.get("nodes") or last.get("nodes"):
            where += f" on {_nodes(answer.get('nodes') or last.get('nodes') or [])}"
        if last.get("flavor"):
            where += f" (flavor {last['flavor']})"
        where += f", admitted at {_when(last.get('time'), now)}"
        where += ", borrowing from its cohort." if last.get("borrowing") else "."
        lines.append(where)
        checkpoint = answer.get("last_checkpoint")
        if checkpoint and checkpoint.get("attempt") in (None, last.get("attempt")):
            lines.append(f"It last reported a checkpoint at {_when(checkpoint['time'], now)}.")
    else:
        lines.append("It never started.")
    reason = answer.get("reason") or {}
    if reason.get("code") and state != "COMPLETED":
        message = reason.get("message") or ""
        lines.append(_sentence(f"{reason['code']}: {message}" if message else reason["code"]))
    return lines


def explain_text(answer: Mapping[str, Any], now: float) -> str:
    """A few short sentences a researcher understands, from an :func:`explain_answer`."""
    job_id = answer["id"]
    state = answer.get("state") or ""
    scheduler = answer.get("scheduler")
    reason = answer.get("reason") or {}
    lines: list[str]
    if state in _FINISHED:
        lines = _finished_lines(answer, now)
    elif scheduler == "admitted" or state in ("ADMITTED", "RUNNING", "COMPLETING"):
        lines = _admitted_lines(answer, now)
    elif scheduler == "held":
        lines = [
            f"Job {job_id} is pending and not yet eligible to be scheduled "
            f"({reason.get('code')}): {reason.get('message')}."
        ]
    elif scheduler == "waiting":
        lines = [
            f"Job {job_id} is pending without a ClusterQueue to queue in "
            f"({reason.get('code')}): {reason.get('message')}."
        ]
    elif scheduler == "pending":
        position = answer.get("position") or {}
        queue, cluster = position.get("queue"), position.get("cluster")
        text = f"Job {job_id} is pending"
        if queue:
            rank = "first" if queue["rank"] == 1 else _ordinal(queue["rank"])
            text += f": {rank} of {queue['of']} in ClusterQueue {answer.get('cluster_queue')}"
        if cluster:
            text += f" ({_ordinal(cluster['rank'])} of {cluster['of']} in the cluster)"
        lines = [text + "."]
        priority = _priority(answer.get("priority") or {})
        if priority:
            lines.append(priority)
        lines.extend(_pending_lines(answer, now))
    else:
        lines = [
            f"Job {job_id} is {state.lower() or 'unknown'}; the scheduler does not know it yet."
        ]
    lines.extend(_history_lines(answer, now))
    return "\n".join(line for line in lines if line) + "\n"
