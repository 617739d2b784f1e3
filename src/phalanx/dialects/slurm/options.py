"""sbatch's command-line options: one table, a getopt_long-compatible parser, typed values.

:func:`parse_sbatch_args` reads options the way sbatch does (glibc
``getopt_long`` with a leading ``+``): ``--opt=value``, ``--opt value``, ``-Nvalue``,
``-N value``, bundled flags (``-Hv``), unambiguous long prefixes (``--part``),
``--`` ending the options, and parsing stops at the first word that is not an
option (the script path; everything after it belongs to the script). Errors use
getopt's and sbatch's wording and are raised as :class:`~phalanx.errors.Invalid`.

The same table reads ``#SBATCH`` words (:func:`parse_words`, which reports the
index of the offending word so the caller can name the line) and the
``SBATCH_*`` input environment variables (:func:`options_from_env`).

Options sbatch has but phalanx does not act on are either *accepted and
reported* (:attr:`SbatchOptions.ignored`, e.g. ``--hint``, ``--no-kill``: they
only tune placement) or *rejected* with a "not supported yet" message (e.g.
``--reservation``): never silently dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from phalanx.dialects.slurm.arrays import ArrayRequest, parse_array
from phalanx.dialects.slurm.dependency import Dependency, parse_dependency
from phalanx.dialects.slurm.memory import parse_memory_mb
from phalanx.errors import Invalid
from phalanx.timefmt import FORMATS, parse_duration_seconds, parse_time_limit

__all__ = [
    "ENV_OPTIONS",
    "OPTIONS",
    "SIGNALS",
    "ExportSpec",
    "GpuCount",
    "GresSpec",
    "Option",
    "OptionError",
    "SbatchOptions",
    "options_from_env",
    "parse_begin",
    "parse_sbatch_args",
    "parse_sbatch_groups",
    "parse_signal",
    "parse_words",
]

TRY_HELP = 'Try "sbatch --help" for more information'
ArgKind = Literal["none", "required", "optional"]
Support = Literal["yes", "ignored", "rejected", "container"]


@dataclass(frozen=True)
class GpuCount:
    """``[type:]count`` of ``--gpus``, ``--gpus-per-node``, ``--gpus-per-task``."""

    count: int
    type: str | None = None


@dataclass(frozen=True)
class GresSpec:
    """One ``name[:type][:count]`` of ``--gres`` (count per node, default 1)."""

    name: str
    count: int = 1
    type: str | None = None


@dataclass(frozen=True)
class ExportSpec:
    """``--export``: ``ALL``, ``NONE``, ``NIL``, or ``[ALL,]VAR[=value],...``."""

    all: bool = True
    """Start from the whole submitting environment."""
    variables: tuple[tuple[str, str | None], ...] = ()
    """``(name, value)``; ``None`` takes the value from the submitting environment."""
    text: str = "ALL"


@dataclass(frozen=True)
class SbatchOptions:
    """sbatch options as given; ``None`` (or empty) where not given.

    Values are parsed: counts are ints, memory is in MB, ``time`` in seconds (0 =
    explicitly unlimited), ``nodes`` a ``(min, max)`` pair. ``begin`` stays text
    (it needs the submit time; see :func:`parse_begin`).
    """

    job_name: str | None = None
    nodes: tuple[int, int] | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus: GpuCount | None = None
    gpus_per_node: GpuCount | None = None
    gpus_per_task: GpuCount | None = None
    gres: tuple[GresSpec, ...] | None = None
    mem: int | None = None
    mem_per_gpu: int | None = None
    mem_per_cpu: int | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: int | None = None
    exclusive: str | None = None
    """``node`` for a plain ``--exclusive``, else ``user``, ``mcs`` or ``topo``."""
    output: str | None = None
    error: str | None = None
    open_mode: Literal["append", "truncate"] | None = None
    array: ArrayRequest | None = None
    dependency: Dependency | None = None
    begin: str | None = None
    hold: bool | None = None
    requeue: bool | str | None = None
    """True for ``--requeue``, ``"expedite"`` for ``--requeue=expedite`` (Slurm 25.11),
    False for ``--no-requeue``."""
    signal: SignalRequest | None = None
    export: ExportSpec | None = None
    chdir: str | None = None
    wrap: str | None = None
    constraint: str | None = None
    nodelist: str | None = None
    exclude: str | None = None
    switches: tuple[int, int | None] | None = None
    """``(count, max wait in seconds or None)``."""
    comment: str | None = None
    nice: int | None = None
    mail_type: str | None = None
    mail_user: str | None = None
    wait: bool | None = None
    test_only: bool | None = None
    parsable: bool | None = None
    verbose: int | None = None
    quiet: bool | None = None
    kill_on_invalid_dep: bool | None = None
    help: bool | None = None
    usage: bool | None = None
    version: bool | None = None
    container: tuple[tuple[str, str | None], ...] | None = None
    """pyxis' options (``--container-image=...``, flags with ``None``), in order: the
    batch script runs in the image."""
    ignored: tuple[str, ...] = field(default=())
    """Options sbatch knows that phalanx accepts but does not act on (``--hint=...``)."""

    def given(self) -> dict[str, Any]:
        """The fields that were given (not None, not empty)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) is not None and f.name != "ignored"
        }

    def over(self, lower: SbatchOptions) -> SbatchOptions:
        """These options taking precedence over ``lower`` (each given field wins; pyxis'
        options one by one)."""
        given = self.given()
        if self.container and lower.container:
            given["container"] = _container_over(self.container, lower.container)
        return replace(lower, **given, ignored=lower.ignored + self.ignored)


def _container_over(
    upper: tuple[tuple[str, str | None], ...], lower: tuple[tuple[str, str | None], ...]
) -> tuple[tuple[str, str | None], ...]:
    """pyxis' options of a higher layer over a lower one's: an option (or either side of
    a flag pair: ``--container-writable``/``--container-readonly``) replaces its own."""

    def family(option: str) -> str:
        bare = option.removeprefix("--no-").removeprefix("--")
        return {"container-readonly": "container-writable"}.get(bare, bare)

    mine = {family(option) for option, _ in upper}
    return tuple(pair for pair in lower if family(pair[0]) not in mine) + upper


class OptionError(Exception):
    """A getopt-level error at word ``index`` (the caller adds where the word came from)."""

    def __init__(self, message: str, index: int, *, usage: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.index = index
        self.usage = usage


# ---------------------------------------------------------------- value parsers


def _bad(msg: str) -> Invalid:
    return Invalid(f"sbatch: error: {msg}")


INT_MAX = 2**31 - 1
"""The largest count sbatch takes (Slurm's ``parse_int`` refuses more)."""


def _whole(digits: str, limit: int = INT_MAX) -> int | None:
    """The ASCII ``digits`` as an int, or None when over ``limit`` (without ``int()`` of an
    arbitrarily long string)."""
    significant = digits.lstrip("0")
    if len(significant) > len(str(limit)):
        return None
    value = int(digits)
    return value if value <= limit else None


def _positive(value: str, name: str) -> int:
    number = _whole(value) if re.fullmatch(r"[0-9]+", value) else None
    if number is None or number < 1:
        raise _bad(f'Invalid numeric value "{value}" for {name}.')
    return number


def _text(value: str, name: str) -> str:
    return value


def _nonempty(value: str, name: str) -> str:
    if not value:
        raise _bad(f"{name} needs a value")
    return value


_SUFFIX = {"": 1, "k": 1024, "m": 1024 * 1024}


def _nodes(value: str, name: str) -> tuple[int, int]:
    if ":" in value or "," in value:
        raise _bad(f"{name}={value}: node count lists with a step are not supported yet")
    m = re.fullmatch(r"([0-9]+)([kKmM]?)(?:-([0-9]+)([kKmM]?))?", value)
    if m is None:
        raise _bad(f"{name}: invalid node count `{value}' (expected N or N-M)")
    low = (_whole(m.group(1)) or 0) * _SUFFIX[m.group(2).lower()]
    high = (_whole(m.group(3)) or 0) * _SUFFIX[m.group(4).lower()] if m.group(3) else low
    if low < 1 or high < low or high > INT_MAX:
        raise _bad(f"{name}: invalid node count `{value}' (expected N or N-M, 1 to {INT_MAX})")
    return low, high


def _gpu_count(value: str, name: str) -> GpuCount:
    if "," in value:
        raise _bad(f"{name}={value}: more than one GPU type per job is not supported yet")
    kind, _, count = value.rpartition(":")
    number = _whole(count) if re.fullmatch(r"[0-9]+", count) else None
    if number is None or number < 1 or ":" in kind:
        raise _bad(f"Invalid {name} specification: {value} (expected [type:]count, e.g. h100:8)")
    return GpuCount(count=number, type=kind or None)


_GRES_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


def _gres(value: str, name: str) -> tuple[GresSpec, ...]:
    out: list[GresSpec] = []
    for item in value.split(","):
        item = item.removeprefix("gres/")
        parts = item.split(":")
        count = 1
        if len(parts) > 1 and (m := re.fullmatch(r"([0-9]+)([kKmMgGtTpP]?)", parts[-1])):
            count = (_whole(m.group(1)) or 0) * _GRES_SUFFIX[m.group(2).lower()]
            parts = parts[:-1]
        if not parts[0] or len(parts) > 2 or not all(parts) or not 1 <= count <= INT_MAX:
            raise _bad(
                f"Invalid generic resource (gres) specification: {name}={value!r} "
                "(expected name[:type][:count], e.g. gpu:h100:8)"
            )
        out.append(GresSpec(name=parts[0], count=count, type=parts[1] if len(parts) > 1 else None))
    return tuple(out)


def _memory(value: str, name: str) -> int:
    return parse_memory_mb(value, name)


def _time(value: str, name: str) -> int:
    try:
        seconds = parse_time_limit(value)
    except Invalid:
        raise _bad(f"Invalid time limit specification {name}={value}: expected {FORMATS}") from None
    return 0 if seconds is None else seconds


def _exclusive(value: str | None, name: str) -> str:
    if value is None or value == "":
        return "node"
    if value in ("user", "mcs", "topo"):
        return value
    raise _bad(f"invalid exclusive option {value} (expected user, mcs or topo)")


def _open_mode(value: str, name: str) -> str:
    if value[:1] in ("a", "A"):
        return "append"
    if value[:1] in ("t", "T"):
        return "truncate"
    raise _bad(f"Invalid --open-mode argument: {value} (expected append or truncate)")


def _array(value: str, name: str) -> ArrayRequest:
    return parse_array(value)


def _dependency(value: str, name: str) -> Dependency:
    return parse_dependency(value)


def _begin(value: str, name: str) -> str:
    parse_begin(value, 0.0)  # validate the syntax now; the time is computed at submit
    return value


def _yes_no(value: str, name: str) -> bool:
    if value.lower() in ("yes", "y", "1"):
        return True
    if value.lower() in ("no", "n", "0"):
        return False
    raise _bad(f"Invalid {name} argument: {value} (expected yes or no)")


def _requeue(value: str | None, name: str) -> bool | str:
    if value is None:
        return True
    if value == "expedite":
        return "expedite"
    raise _bad(f"Invalid {name} argument: {value} (expected no value or expedite)")


def _nice(value: str | None, name: str) -> int:
    if value is None:
        return 100
    if not re.fullmatch(r"[+-]?[0-9]+", value) or _whole(value.lstrip("+-"), 2147483645) is None:
        raise _bad(f"Invalid nice value {value} for {name}: expected -2147483645 to 2147483645")
    return int(value)


def _switches(value: str, name: str) -> tuple[int, int | None]:
    count, at, wait = value.partition("@")
    if not re.fullmatch(r"[0-9]+", count) or _whole(count) is None:
        raise _bad(f"Invalid {name} specification: {value} (expected count[@max-time])")
    seconds: int | None = None
    if at:
        try:
            seconds = parse_duration_seconds(wait)
        except Invalid:
            raise _bad(f"Invalid {name} max-time: {wait}: expected {FORMATS}") from None
    return int(count), seconds


_MAIL_TYPES = frozenset(
    [
        "NONE",
        "BEGIN",
        "END",
        "FAIL",
        "REQUEUE",
        "ALL",
        "INVALID_DEPEND",
        "STAGE_OUT",
        "TIME_LIMIT",
        "TIME_LIMIT_90",
        "TIME_LIMIT_80",
        "TIME_LIMIT_50",
        "ARRAY_TASKS",
    ]
)


def _mail_type(value: str, name: str) -> str:
    bad = [t for t in value.split(",") if t.upper() not in _MAIL_TYPES]
    if bad:
        raise _bad(f"--mail-type={value} invalid: {', '.join(bad)}")
    return value.upper()


_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _export(value: str, name: str) -> ExportSpec:
    upper = value.upper()
    if upper == "ALL":
        return ExportSpec(all=True, text=value)
    if upper in ("NONE", "NIL"):
        return ExportSpec(all=False, text=value)
    include_all = False
    variables: list[tuple[str, str | None]] = []
    for item in value.split(","):
        if item.upper() == "ALL":
            include_all = True
            continue
        var, eq, val = item.partition("=")
        if not _VAR.fullmatch(var):
            raise _bad(f"--export={value}: {item!r} is not ALL, NONE or VAR[=value]")
        variables.append((var, val if eq else None))
    return ExportSpec(all=include_all, variables=tuple(variables), text=value)


SIGNALS: dict[str, int] = {
    name: number
    for number, name in enumerate(
        [
            "HUP",
            "INT",
            "QUIT",
            "ILL",
            "TRAP",
            "ABRT",
            "BUS",
            "FPE",
            "KILL",
            "USR1",
            "SEGV",
            "USR2",
            "PIPE",
            "ALRM",
            "TERM",
            "STKFLT",
            "CHLD",
            "CONT",
            "STOP",
            "TSTP",
            "TTIN",
            "TTOU",
            "URG",
            "XCPU",
            "XFSZ",
            "VTALRM",
            "PROF",
            "WINCH",
            "IO",
            "PWR",
            "SYS",
        ],
        start=1,
    )
}
"""Linux signal numbers by name (without ``SIG``), as Slurm's ``sig_name2num`` knows them."""


@dataclass(frozen=True, slots=True)
class SignalRequest:
    """A parsed ``--signal`` (the wire form is :class:`phalanx.model.SignalSpec`)."""

    signal: int
    seconds: int = 60
    batch_only: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"signal": self.signal, "seconds": self.seconds, "batchOnly": self.batch_only}


def parse_signal(value: str, name: str = "--signal") -> SignalRequest:
    """``[{R|B}:]SIG[@secs]`` (SIG by name, with or without ``SIG``, or number)."""
    text = value
    batch_only = False
    flags, colon, rest = text.partition(":")
    if colon and flags.upper() in ("B", "R", "BR", "RB"):
        batch_only = "B" in flags.upper()
        text = rest
    sig, at, secs = text.partition("@")
    number: int | None = None
    if re.fullmatch(r"[0-9]+", sig):
        number = _whole(sig)
    else:
        number = SIGNALS.get(sig.upper().removeprefix("SIG"))
    if number is None or not 1 <= number <= 64:
        raise _bad(f"Invalid {name} specification: {value} (expected [{{R|B}}:]SIG[@secs])")
    seconds = 60
    if at:
        if not re.fullmatch(r"[0-9]+", secs) or _whole(secs, 65535) is None:
            raise _bad(f"Invalid {name} specification: {value} (seconds must be 0..65535)")
        seconds = int(secs)
    return SignalRequest(signal=number, seconds=seconds, batch_only=batch_only)


def _signal(value: str, name: str) -> SignalRequest:
    return parse_signal(value, name)


_NAMED_TIMES = {"midnight": (0, 0), "noon": (12, 0), "elevenses": (11, 0), "fika": (15, 0)}
_NAMED_TIMES["teatime"] = (16, 0)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_begin(text: str, now: float) -> float:
    """Epoch seconds of the ``--begin`` time ``text``, relative to ``now`` (local time).

    ``now``, ``now+N[seconds|minutes|hours|days|weeks]`` (default seconds),
    ``today``, ``tomorrow``, ``midnight``, ``noon``, ``elevenses``, ``fika``,
    ``teatime``, ``HH:MM[:SS][AM|PM]`` (the next such time),
    ``YYYY-MM-DD[THH:MM[:SS]]``, ``MMDDYY``, ``MM/DD/YY``, ``MM.DD.YY``.
    """
    value = text.strip().lower()
    base = datetime.fromtimestamp(now)
    if m := re.fullmatch(r"now(?:\+([0-9]+)([a-z]*))?", value):
        if m.group(1) is None:
            return now
        unit = m.group(2)
        names = ("seconds", "minutes", "hours", "days", "weeks")
        if unit and not any(n.startswith(unit) or unit == n[:-1] for n in names):
            raise _bad(f"Invalid time specification --begin={text}: unknown unit {unit!r}")
        amount = _whole(m.group(1))
        try:
            if amount is None:
                raise OverflowError
            later = now + amount * _UNITS[unit[:1] or "s"]
            datetime.fromtimestamp(later)
        except (OverflowError, OSError, ValueError):
            raise _bad(
                f"Invalid time specification --begin={text}: too far in the future"
            ) from None
        return later
    midnight = base.replace(hour=0, minute=0, second=0, microsecond=0)
    if value == "today":
        return midnight.timestamp()
    if value == "tomorrow":
        return (midnight + timedelta(days=1)).timestamp()
    clock: tuple[int, int, int] | None = None
    if value in _NAMED_TIMES:
        clock = (*_NAMED_TIMES[value], 0)
    elif m := re.fullmatch(r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?\s*(am|pm)?", value):
        hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        if m.group(4):
            if not 1 <= hour <= 12:
                raise _bad(f"Invalid time specification --begin={text}")
            hour = hour % 12 + (12 if m.group(4) == "pm" else 0)
        clock = (hour, minute, second)
    if clock is not None:
        if clock[0] > 23 or clock[1] > 59 or clock[2] > 59:
            raise _bad(f"Invalid time specification --begin={text}")
        at = midnight.replace(hour=clock[0], minute=clock[1], second=clock[2])
        if at.timestamp() <= now:
            at += timedelta(days=1)
        return at.timestamp()
    for pattern in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d", "%m%d%y", "%m/%d/%y"):
        try:
            return datetime.strptime(value.upper(), pattern).timestamp()
        except (ValueError, OverflowError, OSError):
            continue
    try:
        return datetime.strptime(value, "%m.%d.%y").timestamp()
    except (ValueError, OverflowError, OSError):
        pass
    raise _bad(
        f"Invalid time specification --begin={text}: expected now[+N[units]], HH:MM[:SS], "
        "YYYY-MM-DD[THH:MM[:SS]], MM/DD/YY, midnight, noon, today or tomorrow"
    )


# ---------------------------------------------------------------- the table

Convert = Callable[[Any, str], Any]


@dataclass(frozen=True)
class Option:
    """One sbatch option: how it is spelled, whether it takes a value, where it goes."""

    long: str
    short: str | None
    arg: ArgKind
    field: str | None
    """The :class:`SbatchOptions` field (None for ignored / rejected options)."""
    convert: Convert | None = None
    const: Any = True
    """The value a flag (no argument) stores."""
    support: Support = "yes"
    count: bool = False
    """Each occurrence adds one (``-v``)."""


def _o(long: str, short: str | None, arg: ArgKind, fld: str | None, conv: Convert | None = None,
       const: Any = True, **kw: Any) -> Option:  # fmt: skip
    return Option(long, short, arg, fld, conv, const, **kw)


def _ign(long: str, short: str | None = None, arg: ArgKind = "required") -> Option:
    return Option(long, short, arg, None, support="ignored")


def _rej(long: str, short: str | None = None, arg: ArgKind = "required") -> Option:
    return Option(long, short, arg, None, support="rejected")


def _pyxis(long: str, arg: ArgKind = "required") -> Option:
    return Option(long, None, arg, "container", support="container")


OPTIONS: tuple[Option, ...] = (
    _o("job-name", "J", "required", "job_name", _text),
    _o("nodes", "N", "required", "nodes", _nodes),
    _o("ntasks", "n", "required", "ntasks", _positive),
    _o("ntasks-per-node", None, "required", "ntasks_per_node", _positive),
    _o("cpus-per-task", "c", "required", "cpus_per_task", _positive),
    _o("gpus", "G", "required", "gpus", _gpu_count),
    _o("gpus-per-node", None, "required", "gpus_per_node", _gpu_count),
    _o("gpus-per-task", None, "required", "gpus_per_task", _gpu_count),
    _o("gres", None, "required", "gres", _gres),
    _o("mem", None, "required", "mem", _memory),
    _o("mem-per-gpu", None, "required", "mem_per_gpu", _memory),
    _o("mem-per-cpu", None, "required", "mem_per_cpu", _memory),
    _o("partition", "p", "required", "partition", _nonempty),
    _o("account", "A", "required", "account", _nonempty),
    _o("qos", "q", "required", "qos", _nonempty),
    _o("time", "t", "required", "time", _time),
    _o("exclusive", None, "optional", "exclusive", _exclusive),
    _o("output", "o", "required", "output", _nonempty),
    _o("error", "e", "required", "error", _nonempty),
    _o("open-mode", None, "required", "open_mode", _open_mode),
    _o("array", "a", "required", "array", _array),
    _o("dependency", "d", "required", "dependency", _dependency),
    _o("begin", "b", "required", "begin", _begin),
    _o("hold", "H", "none", "hold"),
    _o("requeue", None, "optional", "requeue", _requeue),
    _o("no-requeue", None, "none", "requeue", const=False),
    _o("signal", None, "required", "signal", _signal),
    _o("export", None, "required", "export", _export),
    _o("chdir", "D", "required", "chdir", _nonempty),
    _o("wrap", None, "required", "wrap", _text),
    _o("constraint", "C", "required", "constraint", _nonempty),
    _o("nodelist", "w", "required", "nodelist", _nonempty),
    _o("exclude", "x", "required", "exclude", _nonempty),
    _o("switches", None, "required", "switches", _switches),
    _o("comment", None, "required", "comment", _text),
    _o("nice", None, "optional", "nice", _nice),
    _o("mail-type", None, "required", "mail_type", _mail_type),
    _o("mail-user", None, "required", "mail_user", _text),
    _o("wait", "W", "none", "wait"),
    _o("test-only", None, "none", "test_only"),
    _o("parsable", None, "none", "parsable"),
    _o("verbose", "v", "none", "verbose", count=True),
    _o("quiet", "Q", "none", "quiet"),
    _o("kill-on-invalid-dep", None, "required", "kill_on_invalid_dep", _yes_no),
    _o("help", "h", "none", "help"),
    _o("usage", "u", "none", "usage"),
    _o("version", "V", "none", "version"),
    # Known to sbatch; placement / accounting tuning phalanx accepts without acting on.
    _ign("no-kill", "k", "optional"),
    _ign("get-user-env", None, "optional"),
    _ign("propagate", None, "optional"),
    _ign("ignore-pbs", None, "none"),
    _ign("hint"),
    _ign("distribution", "m"),
    _ign("gpu-bind"),
    _ign("tres-bind"),
    _ign("mem-bind"),
    _ign("cpu-freq"),
    _ign("gpu-freq"),
    _ign("gres-flags"),
    _ign("threads-per-core"),
    _ign("ntasks-per-core"),
    _ign("ntasks-per-socket"),
    _ign("sockets-per-node"),
    _ign("cores-per-socket"),
    _ign("extra-node-info", "B"),
    _ign("wait-all-nodes"),
    _ign("profile"),
    _ign("acctg-freq"),
    _ign("time-min"),
    _ign("prefer"),
    _ign("delay-boot"),
    _ign("wckey"),
    _ign("mcs-label"),
    _ign("network"),
    _ign("contiguous", None, "none"),
    _ign("overcommit", "O", "none"),
    _ign("oversubscribe", "s", "none"),
    _ign("spread-job", None, "none"),
    _ign("use-min-nodes", None, "none"),
    _ign("input", "i"),
    # Known to sbatch; they change what runs or where, so phalanx refuses them for now.
    _rej("reservation"),
    _rej("licenses", "L"),
    _rej("cpus-per-gpu"),
    _rej("ntasks-per-gpu"),
    _rej("mincpus"),
    _rej("tmp"),
    _rej("deadline"),
    _rej("clusters", "M"),
    _rej("cluster-constraint"),
    _rej("export-file"),
    _rej("nodefile", "F"),
    _rej("uid"),
    _rej("gid"),
    _rej("priority"),
    _rej("batch"),
    _rej("bb"),
    _rej("bbf"),
    _rej("core-spec", "S"),
    _rej("thread-spec"),
    _rej("container"),
    _rej("container-id"),
    *(
        _pyxis(name)
        for name in (
            "container-image",
            "container-mounts",
            "container-workdir",
            "container-name",
            "container-env",
            "container-save",
            "container-unshare",
        )
    ),
    *(
        _pyxis(name, "none")
        for name in (
            "container-mount-home",
            "no-container-mount-home",
            "container-remap-root",
            "no-container-remap-root",
            "container-writable",
            "container-readonly",
            "container-entrypoint",
            "no-container-entrypoint",
            "container-entrypoint-log",
        )
    ),
    _rej("segment"),
    _rej("power"),
)

_BY_LONG = {o.long: o for o in OPTIONS}
_BY_SHORT = {o.short: o for o in OPTIONS if o.short}

ENV_OPTIONS: dict[str, str] = {
    "SBATCH_ACCOUNT": "account",
    "SBATCH_ARRAY_INX": "array",
    "SBATCH_CONSTRAINT": "constraint",
    "SBATCH_DEBUG": "verbose",
    "SBATCH_ERROR": "error",
    "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_EXPORT": "export",
    "SBATCH_GPUS": "gpus",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SBATCH_GRES": "gres",
    "SBATCH_JOB_NAME": "job-name",
    "SBATCH_MEM_PER_CPU": "mem-per-cpu",
    "SBATCH_MEM_PER_GPU": "mem-per-gpu",
    "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_NO_REQUEUE": "no-requeue",
    "SBATCH_OPEN_MODE": "open-mode",
    "SBATCH_OUTPUT": "output",
    "SBATCH_PARTITION": "partition",
    "SBATCH_QOS": "qos",
    "SBATCH_REQUEUE": "requeue",
    "SBATCH_SIGNAL": "signal",
    "SBATCH_TIMELIMIT": "time",
    "SBATCH_WAIT": "wait",
    "SBATCH_DISTRIBUTION": "distribution",
    "SBATCH_HINT": "hint",
    "SBATCH_GPU_BIND": "gpu-bind",
    "SBATCH_GET_USER_ENV": "get-user-env",
    "SBATCH_IGNORE_PBS": "ignore-pbs",
    "SBATCH_NO_KILL": "no-kill",
    "SBATCH_PROFILE": "profile",
    "SBATCH_ACCTG_FREQ": "acctg-freq",
}
"""sbatch.1 INPUT ENVIRONMENT VARIABLES -> the option each one sets. ``SBATCH_REQ_SWITCH``
and ``SBATCH_WAIT4SWITCH`` together set ``--switches`` (see :func:`options_from_env`)."""


# ---------------------------------------------------------------- parsing


def _find_long(name: str, word: str, index: int) -> Option:
    if name in _BY_LONG:
        return _BY_LONG[name]
    matches = [o for o in OPTIONS if o.long.startswith(name)] if name else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise OptionError(f"unrecognized option '{word}'", index)
    choices = " ".join(f"'--{o.long}'" for o in matches)
    raise OptionError(f"option '--{name}' is ambiguous; possibilities: {choices}", index)


def _store(values: dict[str, Any], ignored: list[str], opt: Option, raw: str | None,
           spelled: str, index: int) -> None:  # fmt: skip
    if opt.support == "rejected":
        raise OptionError(
            f"error: --{opt.long} is not supported by phalanx yet; remove it from the "
            "command line or script",
            index,
            usage=False,
        )
    if opt.support == "ignored":
        ignored.append(f"--{opt.long}" + (f"={raw}" if raw is not None else ""))
        return
    if opt.support == "container":
        pairs = values.get("container") or ()
        values["container"] = (*pairs, (f"--{opt.long}", raw if opt.arg != "none" else None))
        return
    assert opt.field is not None
    if opt.count:
        values[opt.field] = values.get(opt.field, 0) + 1
        return
    if opt.arg == "none":
        values[opt.field] = opt.const
        return
    assert opt.convert is not None
    if raw is None and opt.arg == "required":  # pragma: no cover - guarded by the caller
        raise OptionError(f"option '{spelled}' requires an argument", index)
    if raw is not None and "\0" in raw:
        # Not from a real command line or environment, but not passed on either.
        raise OptionError(f"error: --{opt.long}: contains a NUL character", index, usage=False)
    try:
        values[opt.field] = opt.convert(raw, f"--{opt.long}")
    except Invalid as exc:
        raise OptionError(exc.detail.removeprefix("sbatch: "), index, usage=False) from None


def parse_words(words: list[str]) -> tuple[SbatchOptions, list[str]]:
    """Options from ``words`` and the words after them; :class:`OptionError` on a bad one.

    Messages carry no ``sbatch:`` prefix; :func:`parse_sbatch_args` adds it.
    """
    values: dict[str, Any] = {}
    ignored: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if word.startswith("--"):
            name, eq, raw = word[2:].partition("=")
            opt = _find_long(name, word, i)
            value: str | None = raw if eq else None
            if opt.arg == "none" and eq:
                raise OptionError(f"option '--{opt.long}' doesn't allow an argument", i)
            if opt.arg == "required" and not eq:
                if i + 1 >= len(words):
                    raise OptionError(f"option '--{opt.long}' requires an argument", i)
                i += 1
                value = words[i]
            _store(values, ignored, opt, value, f"--{opt.long}", i)
        elif word.startswith("-") and word != "-":
            j = 1
            while j < len(word):
                letter = word[j]
                short = _BY_SHORT.get(letter)
                if short is None:
                    raise OptionError(f"invalid option -- '{letter}'", i)
                rest = word[j + 1 :]
                if short.arg == "none":
                    _store(values, ignored, short, None, f"-{letter}", i)
                    j += 1
                    continue
                if short.arg == "optional":
                    _store(values, ignored, short, rest or None, f"-{letter}", i)
                    break
                if not rest:
                    if i + 1 >= len(words):
                        raise OptionError(f"option requires an argument -- '{letter}'", i)
                    i += 1
                    rest = words[i]
                _store(values, ignored, short, rest, f"-{letter}", i)
                break
        else:
            break
        i += 1
    return SbatchOptions(**values, ignored=tuple(ignored)), words[i:]


def parse_sbatch_args(argv: list[str]) -> tuple[SbatchOptions, list[str]]:
    """sbatch's options from ``argv`` (without the program name), and the script path
    and its arguments (everything from the first non-option word on).

    >>> opts, rest = parse_sbatch_args(["-N2", "--gpus-per-node", "8", "job.sh", "-x"])
    >>> opts.nodes, opts.gpus_per_node.count, rest
    ((2, 2), 8, ['job.sh', '-x'])
    """
    try:
        return parse_words(list(argv))
    except OptionError as exc:
        raise Invalid(_format_error(exc)) from None


HET_SEPARATOR = ":"
"""The word that separates the components of a heterogeneous job on the command line."""


def parse_sbatch_groups(argv: list[str]) -> tuple[list[SbatchOptions], list[str]]:
    """sbatch's command line split at ``:`` into the options of each heterogeneous job
    component (one group for an ordinary job), and the script path and its arguments.

    As sbatch does: each group's options end at its first operand; when that operand is
    ``:``, the next group's options follow it; a ``:`` among the script's arguments is
    dropped (sbatch's first pass removes every ``:`` before reading the operands).

    >>> groups, rest = parse_sbatch_groups(["-N1", ":", "-N2", "job.sh", "x"])
    >>> [g.nodes for g in groups], rest
    ([(1, 1), (2, 2)], ['job.sh', 'x'])
    """
    groups: list[SbatchOptions] = []
    words = list(argv)
    while True:
        try:
            opts, rest = parse_words(words)
        except OptionError as exc:
            raise Invalid(_format_error(exc)) from None
        groups.append(opts)
        if not rest or rest[0] != HET_SEPARATOR or _after_dashes(words, rest):
            return groups, [w for w in rest if w != HET_SEPARATOR]
        words = rest[1:]


def _after_dashes(words: list[str], rest: list[str]) -> bool:
    """Whether ``rest`` follows a ``--`` that ended the options (then ``:`` is an operand)."""
    consumed = len(words) - len(rest)
    return consumed > 0 and words[consumed - 1] == "--"


def _format_error(exc: OptionError) -> str:
    if exc.usage:
        return f"sbatch: {exc.message}\n{TRY_HELP}"
    return f"sbatch: {exc.message}"


def _env_flag(value: str) -> bool:
    """sbatch's test for a flag variable: empty, ``yes``, or a non-zero number."""
    if value == "" or value.lower() == "yes":
        return True
    return bool(re.fullmatch(r"[+-]?[0-9]+", value)) and value.lstrip("+-").strip("0") != ""


def options_from_env(env: Mapping[str, str]) -> SbatchOptions:
    """The options the ``SBATCH_*`` input environment variables set."""
    values: dict[str, Any] = {}
    ignored: list[str] = []
    for var, long in ENV_OPTIONS.items():
        if var not in env:
            continue
        value = env[var]
        opt = _BY_LONG[long]
        try:
            if opt.count:
                if re.fullmatch(r"[0-9]+", value) and (level := _whole(value)) is not None:
                    values["verbose"] = level
                continue
            if opt.arg == "none":
                if _env_flag(value) and opt.support == "yes":
                    assert opt.field is not None
                    values[opt.field] = opt.const
                elif _env_flag(value):
                    ignored.append(f"--{long} ({var})")
                continue
            if opt.support != "yes":
                ignored.append(f"--{long}={value} ({var})")
                continue
            assert opt.field is not None and opt.convert is not None
            if "\0" in value:
                raise _bad(f"--{long}: contains a NUL character")
            raw: str | None = value if value != "" or opt.arg == "required" else None
            values[opt.field] = opt.convert(raw, f"--{long}")
        except Invalid as exc:
            raise Invalid(
                f"{exc.detail}\nsbatch: error: (from the environment: {var}={value})"
            ) from None
    if "SBATCH_REQ_SWITCH" in env:
        spec = env["SBATCH_REQ_SWITCH"]
        if "SBATCH_WAIT4SWITCH" in env:
            spec += "@" + env["SBATCH_WAIT4SWITCH"]
        values["switches"] = _switches(spec, "--switches (SBATCH_REQ_SWITCH)")
    return SbatchOptions(**values, ignored=tuple(ignored))
