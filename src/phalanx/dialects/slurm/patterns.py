"""Slurm filename patterns for ``--output`` / ``--error`` (sbatch.1 FILENAME PATTERN).

``%%`` ``%``; ``%A`` array master job id (the job id outside arrays); ``%a`` array
index (4294967294, Slurm's NO_VAL, outside arrays); ``%b`` array index mod 10;
``%J`` ``jobid.stepid`` (just the job id for the batch step); ``%j`` job id;
``%N`` short host name; ``%n`` node index; ``%s`` step id (``batch``); ``%t``
task rank; ``%u`` user; ``%x`` job name; ``%r`` restart count. A number between
``%`` and the letter zero-pads numeric fields (``%4j`` -> ``0128``; at most 10).
An unknown ``%X`` is kept as written. A pattern containing a backslash anywhere
is not expanded at all; its backslashes are removed (print_fields.c
``expand_stdio_fields``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_VAL", "PatternFields", "expand_pattern"]

NO_VAL = 4294967294
"""What ``%a`` and ``%b`` expand from outside job arrays."""

_MAX_WIDTH = 10


@dataclass(frozen=True)
class PatternFields:
    """The values a pattern can name, for one file of one job (step)."""

    job_id: int
    job_name: str = ""
    user: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    node: str = ""
    node_index: int = 0
    task: int = 0
    step: int | None = None
    """The step id; ``None`` is the batch step."""
    restart_count: int = 0


def expand_pattern(pattern: str, fields: PatternFields) -> str:
    """``pattern`` with its ``%`` tokens replaced from ``fields``.

    >>> expand_pattern("logs/%x-%j.out", PatternFields(job_id=128, job_name="train"))
    'logs/train-128.out'
    >>> expand_pattern("job%4j-%2t.out", PatternFields(job_id=128))
    'job0128-00.out'
    """
    if "\\" in pattern:
        return pattern.replace("\\", "")
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch != "%" or i + 1 == n:
            out.append(ch)
            i += 1
            continue
        j = i + 1
        while j < n and "0" <= pattern[j] <= "9":
            j += 1
        if j == n:
            out.append(pattern[i:])
            break
        digits = pattern[i + 1 : j].lstrip("0")  # %004j is %4j
        # The width is capped at 10; a longer number is never read whole.
        width = _MAX_WIDTH if len(digits) > 2 else min(int(digits or "0"), _MAX_WIDTH)
        letter = pattern[j]
        value = _field(letter, fields, width)
        out.append(pattern[i : j + 1] if value is None else value)
        i = j + 1
    return "".join(out)


def _num(value: int, width: int) -> str:
    return str(value).zfill(width)


def _field(letter: str, f: PatternFields, width: int) -> str | None:
    array = f.array_task_id is not None
    match letter:
        case "%":
            return "%"
        case "A":
            return _num(f.array_job_id if array and f.array_job_id is not None else f.job_id, width)
        case "a":
            return _num(f.array_task_id if f.array_task_id is not None else NO_VAL, width)
        case "b":
            return _num((f.array_task_id if f.array_task_id is not None else NO_VAL) % 10, width)
        case "j":
            return _num(f.job_id, width)
        case "J":
            jid = _num(f.job_id, width)
            return jid if f.step is None else f"{jid}.{f.step}"
        case "N":
            return f.node.split(".", 1)[0]
        case "n":
            return _num(f.node_index, width)
        case "t":
            return _num(f.task, width)
        case "s":
            return "batch" if f.step is None else _num(f.step, width)
        case "u":
            return f.user
        case "x":
            return f.job_name
        case "r":
            return _num(f.restart_count, width)
    return None
