"""Slurm job dependencies (``--dependency``; sbatch.1, job_scheduler.c ``_parse_dependency_str``).

Grammar: terms separated by ``,`` (all must hold) or ``?`` (any one suffices),
never both. A term is ``singleton``, a bare job id (``afterany``), or
``type:job[:job...]`` with ``type`` one of ``after``, ``afterany``, ``afterok``,
``afternotok``, ``aftercorr`` and ``afterburstbuffer``. A job is ``ID`` (the
whole job, every task of an array), ``ID_TASK`` (one array task),
``ID_[1-5,7]`` (several tasks) or ``ID_*`` (the whole array); ``after`` takes
``ID+MINUTES`` (start, plus a delay).

:func:`evaluate` decides a parsed dependency against the dependees' states,
with Slurm's semantics (slurm.md section 1.6):

* ``after``: the dependee started (or was cancelled before starting), plus the delay;
* ``afterany`` / ``afterburstbuffer``: the dependee ended, in any state;
* ``afterok``: it ended COMPLETED (exit code 0); any other end can never satisfy it;
* ``afternotok``: it ended in any state but COMPLETED (FAILED, TIMEOUT, NODE_FAIL,
  OUT_OF_MEMORY, CANCELLED, PREEMPTED); ending COMPLETED can never satisfy it;
* ``aftercorr``: like ``afterok``, task by task: array task *i* waits for task *i*
  of the dependee;
* ``singleton``: no other job of the same name and user is running or suspended
  (the caller decides, see ``singleton_clear``).

A dependee the lookup no longer knows (purged after ``MinJobAge``) lifts the term,
as Slurm does ("job is gone, dependency lifted").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from phalanx.dialects.slurm.hostlists import BadHostlist, expand_hostlist
from phalanx.errors import Invalid

__all__ = [
    "FAILED_ENDS",
    "FINISHED",
    "KINDS",
    "DepTerm",
    "Dependee",
    "Dependency",
    "Outcome",
    "evaluate",
    "parse_dependency",
]

Kind = Literal[
    "after", "afterany", "afterok", "afternotok", "aftercorr", "afterburstbuffer", "singleton"
]
Outcome = Literal["satisfied", "waiting", "never"]

KINDS: tuple[str, ...] = (
    "after",
    "afterany",
    "afterok",
    "afternotok",
    "aftercorr",
    "afterburstbuffer",
    "singleton",
)
FINISHED = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY"}
)
"""Job states that are an end."""
FAILED_ENDS = FINISHED - {"COMPLETED"}
"""Ends that satisfy ``afternotok`` (and can never satisfy ``afterok``)."""

_ERROR = "sbatch: error: Batch job submission failed: Job dependency problem"
_JOB = re.compile(r"([0-9]+)(?:_(\*|[0-9]+|\[[0-9,\-]+\]))?(?:\+([0-9]+))?")
_MAX_ID = 2**32 - 1
"""Job ids, array task ids and delays are 32-bit in Slurm; larger numbers are refused."""


@dataclass(frozen=True)
class DepTerm:
    """One dependee of one kind: ``job_id`` (``None`` for singleton), ``array_task``
    (``None``: the whole job), ``minutes`` (``after`` only)."""

    kind: Kind
    job_id: int | None = None
    array_task: int | None = None
    minutes: int = 0

    def format(self) -> str:
        if self.kind == "singleton":
            return "singleton"
        return f"{self.kind}:{self._target()}"

    def _target(self) -> str:
        text = str(self.job_id)
        if self.array_task is not None:
            text += f"_{self.array_task}"
        if self.minutes:
            text += f"+{self.minutes}"
        return text


@dataclass(frozen=True)
class Dependency:
    """Parsed ``--dependency``: ``terms`` joined by AND (``any_of`` False) or OR."""

    terms: tuple[DepTerm, ...]
    any_of: bool = False

    def format(self) -> str:
        """Normalized text (``afterok:12:13_2,afterany:14``), accepted by
        :func:`parse_dependency`; consecutive terms of one kind share a prefix."""
        groups: list[str] = []
        last: Kind | None = None
        for term in self.terms:
            if term.kind == last and term.kind != "singleton":
                groups[-1] += f":{term._target()}"
            else:
                groups.append(term.format())
            last = term.kind
        return ("?" if self.any_of else ",").join(groups)


@dataclass(frozen=True)
class Dependee:
    """What :func:`evaluate` needs of one dependee job or array task."""

    state: str
    """A job state name (``PENDING``, ``RUNNING``, ``COMPLETED``, ...)."""
    start_time: float | None = None
    """When it started running (epoch seconds); ``None`` if it never did."""


def _invalid(text: str, why: str) -> Invalid:
    return Invalid(f"{_ERROR}\nsbatch: error: --dependency={text}: {why}")


def parse_dependency(text: str) -> Dependency:
    """Parse a Slurm dependency specification.

    >>> parse_dependency("afterok:12_3:13,singleton").format()
    'afterok:12_3:13,singleton'
    """
    if not text:
        raise _invalid(text, "empty")
    parts, seps = _split(text)
    if len(seps) > 1:
        raise _invalid(text, "use either ',' (all must hold) or '?' (any one), not both")
    terms: list[DepTerm] = []
    for part in parts:
        terms.extend(_parse_part(text, part))
    return Dependency(terms=tuple(terms), any_of="?" in seps)


def _split(text: str) -> tuple[list[str], set[str]]:
    """``text`` split at ``,`` and ``?`` outside ``[...]``, and the separators seen."""
    parts, seps, depth, start = [], set(), 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        elif ch in ",?" and depth == 0:
            parts.append(text[start:i])
            seps.add(ch)
            start = i + 1
    parts.append(text[start:])
    return parts, seps


def _parse_part(text: str, part: str) -> list[DepTerm]:
    if part == "singleton":
        return [DepTerm("singleton")]
    if not part:
        raise _invalid(text, "an empty term (two separators in a row, or one at an end)")
    kind, sep, jobs = part.partition(":")
    if not sep:
        if _JOB.fullmatch(part) and "+" not in part:  # a bare job id means afterany
            kind, jobs = "afterany", part
        else:
            raise _invalid(text, f"{part!r}: expected TYPE:JOBID[:JOBID...] or singleton")
    if kind == "expand":
        raise _invalid(text, "expand: dependencies are not supported")
    if kind not in KINDS or kind == "singleton":
        raise _invalid(
            text, f"unknown dependency type {kind!r}; expected one of {', '.join(KINDS)}"
        )
    out: list[DepTerm] = []
    for job in jobs.split(":"):
        m = _JOB.fullmatch(job)
        if m is None or not job.isascii():
            raise _invalid(text, f"{job!r} is not a job id (ID, ID_TASK, ID_[A-B] or ID_*)")
        for number in (m.group(1), m.group(3)):
            if number is not None and (len(number) > 10 or int(number) > _MAX_ID):
                raise _invalid(text, f"{job!r}: {number[:24]} is too large (at most {_MAX_ID})")
        job_id, task, minutes = int(m.group(1)), m.group(2), int(m.group(3) or 0)
        if m.group(3) is not None and kind != "after":
            raise _invalid(text, f"{job!r}: a +minutes delay is only allowed with after:")
        if job_id == 0:
            raise _invalid(text, "job id 0 does not exist")
        tasks: list[int | None]
        if task is None or task == "*":
            tasks = [None]
        elif task.startswith("["):
            try:
                numbers = [int(t) for t in expand_hostlist(task)]
            except BadHostlist as exc:
                raise _invalid(
                    text, f"{job!r}: bad array task list {task} ({exc.detail})"
                ) from None
            if any(t > _MAX_ID for t in numbers):
                raise _invalid(text, f"{job!r}: an array task is too large (at most {_MAX_ID})")
            tasks = list(numbers)
        elif len(task) > 10 or int(task) > _MAX_ID:
            raise _invalid(
                text, f"{job!r}: array task {task[:24]} is too large (at most {_MAX_ID})"
            )
        else:
            tasks = [int(task)]
        out.extend(DepTerm(kind, job_id, t, minutes) for t in tasks)  # type: ignore[arg-type]
    return out


Lookup = Callable[[int, int | None], Sequence[Dependee] | None]
"""``lookup(job_id, array_task)``: the dependee's states (every task of an array
when ``array_task`` is None), or None when the job is not known (any more)."""


def evaluate(
    dep: Dependency,
    lookup: Lookup,
    *,
    now: float,
    array_task: int | None = None,
    singleton_clear: bool = True,
) -> Outcome:
    """Whether ``dep`` is satisfied, still waiting, or can never be satisfied.

    ``array_task`` is the dependent job's own array index (for ``aftercorr``);
    ``singleton_clear`` whether no other job of the same name and user is running
    or suspended (for ``singleton``).
    """
    outcomes = [_term(t, lookup, now, array_task, singleton_clear) for t in dep.terms]
    if dep.any_of:
        if "satisfied" in outcomes:
            return "satisfied"
        return "never" if all(o == "never" for o in outcomes) else "waiting"
    if "never" in outcomes:
        return "never"
    return "satisfied" if all(o == "satisfied" for o in outcomes) else "waiting"


def _term(
    term: DepTerm, lookup: Lookup, now: float, own_task: int | None, singleton_clear: bool
) -> Outcome:
    if term.kind == "singleton":
        return "satisfied" if singleton_clear else "waiting"
    assert term.job_id is not None
    task = term.array_task
    if term.kind == "aftercorr" and task is None and own_task is not None:
        task = own_task
    states = lookup(term.job_id, task)
    if not states:
        return "satisfied"  # the job is gone: Slurm lifts the dependency
    names = [s.state for s in states]
    if term.kind == "after":
        for s in states:
            if s.state == "CANCELLED" and s.start_time is None:
                continue
            if s.state == "PENDING" or s.start_time is None:
                return "waiting"
            if now < s.start_time + term.minutes * 60:
                return "waiting"
        return "satisfied"
    if term.kind in ("afterany", "afterburstbuffer"):
        return "satisfied" if all(n in FINISHED for n in names) else "waiting"
    if term.kind in ("afterok", "aftercorr"):
        if any(n in FAILED_ENDS for n in names):
            return "never"
        return "satisfied" if all(n == "COMPLETED" for n in names) else "waiting"
    # afternotok
    if not all(n in FINISHED for n in names):
        return "waiting"
    return "satisfied" if any(n in FAILED_ENDS for n in names) else "never"
