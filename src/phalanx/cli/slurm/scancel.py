"""``phalanx scancel``: cancel or signal jobs, array tasks and task ranges as scancel does.

``12`` is the job (a whole array when 12 is an array job id), ``12_3`` one
array task, ``12_[1-3]`` several; filters (``-u -n -t -p -A``) are ANDed and,
with no ids, select the jobs. Errors read as scancel's
(``scancel: error: Kill job error on job id 12: Invalid job id specified``);
the exit status is 1 when any job could not be cancelled.
"""

from __future__ import annotations

import signal as _signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from phalanx.cli.slurm.common import (
    FINISHED,
    my_user,
    parse_job_ref,
    resolve,
    slurm_state,
    tool_error,
)

if TYPE_CHECKING:
    from phalanx.cli.slurm.common import ArrayRef

__all__ = ["parse_signal", "resolve", "run"]

_CANCEL_STATES = {"PENDING": "PENDING", "PD": "PENDING", "RUNNING": "RUNNING", "R": "RUNNING"}
_CANCEL_STATES |= {"SUSPENDED": "SUSPENDED", "S": "SUSPENDED"}


def parse_signal(text: str) -> int | None:
    """``TERM``, ``SIGTERM``, ``15`` -> 15; ``None`` if unknown."""
    text = text.strip().upper()
    if text.isdigit():
        return int(text)
    name = text if text.startswith("SIG") else "SIG" + text
    value = getattr(_signal, name, None)
    return int(value) if isinstance(value, _signal.Signals) else None


def _error_text(exc: Exception) -> str:
    from phalanx import errors

    if isinstance(exc, errors.NotFound):
        return "Invalid job id specified"
    if isinstance(exc, errors.Conflict):
        return "Job/step already completing or completed"
    if isinstance(exc, errors.Forbidden | errors.Unauthorized):
        return "Access/permission denied"
    return str(getattr(exc, "detail", exc))


def _filtered(
    jobs: Sequence[dict[str, Any]],
    *,
    names: list[str] | None,
    states: set[str] | None,
    partitions: list[str] | None,
    accounts: list[str] | None,
    users: list[str] | None,
) -> list[dict[str, Any]]:
    out = []
    for job in jobs:
        if names and job.get("name") not in names:
            continue
        if states and slurm_state(job) not in states:
            continue
        if partitions and (job.get("partition") or job.get("cluster_queue")) not in partitions:
            continue
        if accounts and (job.get("account") or job.get("tenant")) not in accounts:
            continue
        if users and job.get("user") not in users:
            continue
        out.append(job)
    return out


def run(
    ids: Sequence[str],
    *,
    users: list[str] | None,
    names: list[str] | None,
    states: list[str] | None,
    partitions: list[str] | None,
    accounts: list[str] | None,
    signal: str | None,
    batch: bool,
    full: bool,
    me: bool,
    quiet: bool,
    verbose: bool,
) -> int:
    """The scancel command; returns the exit status."""
    from phalanx.client import Client
    from phalanx.errors import PhalanxError

    signum = None
    if signal is not None:
        signum = parse_signal(signal)
        if signum is None:
            tool_error("scancel", f"Invalid job signal: {signal}")
            return 1
    wanted_states: set[str] | None = None
    if states:
        wanted_states = set()
        for item in (s.strip().upper() for v in states for s in v.split(",")):
            if item not in _CANCEL_STATES:
                tool_error("scancel", f"Invalid job state specified: {item}")
                return 1
            wanted_states.add(_CANCEL_STATES[item])
    refs: list[ArrayRef] = []
    for text in ids:
        ref = parse_job_ref(text)
        if ref is None:
            tool_error("scancel", f"Invalid job id {text}")
            return 1
        if ref.het_offset is not None:
            # Slurm cancels that component alone; a phalanx job is one gang.
            tool_error(
                "scancel",
                f"Kill job error on job id {text}: phalanx runs a heterogeneous job as one "
                f"job and cancels it whole: scancel {ref.job_id}",
            )
            return 1
        refs.append(ref)
    filters = bool(users or names or states or partitions or accounts or me)
    if not refs and not filters:
        tool_error("scancel", "No job identification provided")
        return 1
    failed = False
    try:
        with Client() as client:
            if me:
                users = [my_user(client)]
            targets: list[tuple[str, dict[str, Any]]] = []
            if refs:
                for ref in refs:
                    found = resolve(client, ref)
                    if not found:
                        tool_error(
                            "scancel",
                            f"Kill job error on job id {ref.text}: Invalid job id specified",
                        )
                        failed = True
                        continue
                    for job in _filtered(
                        found,
                        names=names,
                        states=wanted_states,
                        partitions=partitions,
                        accounts=accounts,
                        users=users,
                    ):
                        targets.append((_label(job), job))
            else:
                listed = client.jobs(user=users, tenant=accounts, name=names)
                live = [j for j in listed if slurm_state(j) not in FINISHED]
                for job in _filtered(
                    live,
                    names=names,
                    states=wanted_states,
                    partitions=partitions,
                    accounts=accounts,
                    users=users,
                ):
                    targets.append((_label(job), job))
            for label, job in targets:
                if slurm_state(job) in FINISHED and signum is None:
                    if not quiet:
                        tool_error(
                            "scancel",
                            f"Kill job error on job id {label}: "
                            "Job/step already completing or completed",
                        )
                        failed = True
                    continue
                if verbose:
                    what = "Terminating" if signum is None else f"Signal {signum} to"
                    sys.stderr.write(f"scancel: {what} job {label}\n")
                try:
                    if signum is None and not batch:
                        client.cancel(int(job["id"]))
                    else:
                        client.signal(
                            int(job["id"]),
                            _signal.SIGKILL if signum is None else signum,
                            batch_only=batch and not full,
                        )
                except PhalanxError as exc:
                    text = _error_text(exc)
                    if quiet and text.startswith("Job/step already"):
                        continue
                    kind = "Kill job error" if signum is None else "Signal job error"
                    tool_error("scancel", f"{kind} on job id {label}: {text}")
                    failed = True
    except PhalanxError as exc:
        tool_error("scancel", exc.detail)
        return 1
    return 1 if failed else 0


def _label(job: dict[str, Any]) -> str:
    if job.get("array_job_id") is not None and job.get("array_task_id") is not None:
        return f"{job['array_job_id']}_{job['array_task_id']}"
    return str(job["id"])
