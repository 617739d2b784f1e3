"""The fast path of the read-only commands: their command lines parsed without click.

``squeue``, ``sinfo``, ``sacct``, ``scontrol``, ``sprio``, ``sshare`` and
``scancel`` (through the shims or ``phalanx TOOL``) and ``phalanx get jobs`` are
typed many times a day, and most of what they cost is the interpreter starting
and importing. :data:`OPTIONS` spells each tool's click options (the definitions
in :mod:`phalanx.cli.slurm.commands`, which a test keeps equal); :func:`parse`
reads a command line with them the way click does for the forms people type, and
answers ``None`` for anything else (``--help``, an unknown option, ``--``, a value
that looks like an option, ...) so that click parses it and prints its usual
messages. Both paths end in the same :func:`call`.

The shims run ``python -I -S`` (no ``site``: the venv's ``site-packages`` and
``.pth`` files are not read) with this package's parent directory put first on
``sys.path``; :func:`shim` loads ``site`` only when the command goes on to click,
which lives in ``site-packages``.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["DEFAULTS", "OPTIONS", "POSITIONAL", "call", "parse", "run", "shim"]

FLAG, VALUE, MULTI = "flag", "value", "multi"

OPTIONS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "squeue": (
        ("fmt", VALUE, ("--format", "-o")),
        ("long_fmt", VALUE, ("--Format", "-O")),
        ("users", MULTI, ("--user", "-u")),
        ("jobs", MULTI, ("--jobs", "-j")),
        ("partitions", MULTI, ("--partition", "-p")),
        ("states", MULTI, ("--states", "-t")),
        ("accounts", MULTI, ("--account", "-A")),
        ("names", MULTI, ("--name", "-n")),
        ("noheader", FLAG, ("--noheader", "-h")),
        ("long", FLAG, ("--long", "-l")),
        ("start", FLAG, ("--start",)),
        ("array", FLAG, ("--array", "-r")),
        ("me", FLAG, ("--me",)),
        ("all_", FLAG, ("--all", "-a")),
        ("as_json", FLAG, ("--json",)),
    ),
    "scancel": (
        ("users", MULTI, ("--user", "-u")),
        ("names", MULTI, ("--name", "-n")),
        ("states", MULTI, ("--state", "-t")),
        ("partitions", MULTI, ("--partition", "-p")),
        ("accounts", MULTI, ("--account", "-A")),
        ("signal", VALUE, ("--signal", "-s")),
        ("batch", FLAG, ("--batch", "-b")),
        ("full", FLAG, ("--full", "-f")),
        ("me", FLAG, ("--me",)),
        ("quiet", FLAG, ("--quiet", "-Q")),
        ("verbose", FLAG, ("--verbose", "-v")),
    ),
    "sinfo": (
        ("fmt", VALUE, ("--format", "-o")),
        ("node_oriented", FLAG, ("--Node", "-N")),
        ("partitions", MULTI, ("--partition", "-p")),
        ("noheader", FLAG, ("--noheader", "-h")),
        ("long", FLAG, ("--long", "-l")),
        ("summarize", FLAG, ("--summarize", "-s")),
        ("states", MULTI, ("--states", "-t")),
        ("reasons", FLAG, ("--list-reasons", "-R")),
    ),
    "sacct": (
        ("jobs", MULTI, ("--jobs", "-j")),
        ("fields", VALUE, ("--format", "-o")),
        ("brief", FLAG, ("--brief", "-b")),
        ("allocations", FLAG, ("--allocations", "-X")),
        ("noheader", FLAG, ("--noheader", "-n")),
        ("parsable", FLAG, ("--parsable", "-p")),
        ("parsable2", FLAG, ("--parsable2", "-P")),
        ("starttime", VALUE, ("--starttime", "-S")),
        ("endtime", VALUE, ("--endtime", "-E")),
        ("states", MULTI, ("--state", "-s")),
        ("users", MULTI, ("--user", "-u")),
        ("allusers", FLAG, ("--allusers", "-a")),
        ("accounts", MULTI, ("--account", "-A")),
        ("partitions", MULTI, ("--partition", "-r")),
        ("names", MULTI, ("--name",)),
        ("as_json", FLAG, ("--json",)),
        ("duplicates", FLAG, ("--duplicates", "-D")),
    ),
    "scontrol": (
        ("oneliner", FLAG, ("--oneliner", "-o")),
        ("details", FLAG, ("--details", "-d")),
    ),
    "sprio": (
        ("jobs", MULTI, ("--jobs", "-j")),
        ("users", MULTI, ("--user", "-u")),
        ("noheader", FLAG, ("--noheader", "-h")),
        ("long", FLAG, ("--long", "-l")),
        ("norm", FLAG, ("--norm", "-n")),
        ("weights", FLAG, ("--weights", "-w")),
    ),
    "sshare": (
        ("noheader", FLAG, ("--noheader", "-n")),
        ("parsable", FLAG, ("--parsable", "-p")),
        ("parsable2", FLAG, ("--parsable2", "-P")),
        ("accounts", MULTI, ("--accounts", "-A")),
        ("users", MULTI, ("--users", "-u")),
        ("all_users", FLAG, ("--all", "-a")),
        ("long", FLAG, ("--long", "-l")),
    ),
    "get": (
        ("output", VALUE, ("--output", "-o")),
        ("state", MULTI, ("--state", "-t")),
        ("tenant", MULTI, ("--tenant", "-n")),
        ("user", MULTI, ("--user", "-u")),
        ("queue", VALUE, ("--queue", "-q")),
        ("all_tenants", FLAG, ("--all", "-A")),
        ("limit", VALUE, ("--limit",)),
    ),
}
"""Each tool's options as click defines them: (parameter, kind, option names)."""

POSITIONAL: dict[str, str] = {"scancel": "ids", "scontrol": "args", "get": "args"}
"""The tools that take arguments, and the click parameter that collects them."""
DEFAULTS: dict[str, dict[str, str]] = {"get": {"output": "table"}}
"""The options with a default value (others: ``None``, ``()`` or ``False``)."""


def parse(tool: str, argv: list[str]) -> dict[str, Any] | None:
    """The parameters click would pass ``tool``'s command for ``argv``; ``None`` when
    click should parse it (anything this parser does not know to mean the same)."""
    spec = OPTIONS.get(tool)
    if spec is None:
        return None
    names: dict[str, tuple[str, str]] = {}
    opts: dict[str, Any] = {}
    for dest, kind, option_names in spec:
        opts[dest] = False if kind == FLAG else () if kind == MULTI else None
        for name in option_names:
            names[name] = (dest, kind)
    opts.update(DEFAULTS.get(tool, {}))
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        if arg.startswith("--"):
            name, eq, attached = arg.partition("=")
            found = names.get(name)
            if found is None or name == "--":
                return None
            dest, kind = found
            if kind == FLAG:
                if eq:
                    return None
                opts[dest] = True
                continue
            if not eq:
                if i >= len(argv) or argv[i].startswith("-"):
                    return None
                attached = argv[i]
                i += 1
            _store(opts, dest, kind, attached)
            continue
        # A cluster of short options: flags, then at most one that takes a value (the
        # rest of the cluster, or the next argument).
        for at in range(1, len(arg)):
            found = names.get("-" + arg[at])
            if found is None:
                return None
            dest, kind = found
            if kind == FLAG:
                opts[dest] = True
                continue
            value = arg[at + 1 :]
            if not value:
                if i >= len(argv) or argv[i].startswith("-"):
                    return None
                value = argv[i]
                i += 1
            _store(opts, dest, kind, value)
            break
    where = POSITIONAL.get(tool)
    if where is None:
        if positional:
            return None
    else:
        opts[where] = tuple(positional)
    return opts


def _store(opts: dict[str, Any], dest: str, kind: str, value: str) -> None:
    opts[dest] = (*opts[dest], value) if kind == MULTI else value


def _split(values: tuple[str, ...] | None) -> list[str] | None:
    if not values:
        return None
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def call(tool: str, opts: dict[str, Any]) -> int:
    """Run ``tool`` with click's parameters ``opts`` (from click or :func:`parse`)."""
    if tool == "squeue":
        from phalanx.cli.slurm import squeue

        return squeue.run(
            fmt=opts["fmt"],
            long_fmt=opts["long_fmt"],
            users=_split(opts["users"]),
            jobs=_split(opts["jobs"]),
            partitions=_split(opts["partitions"]),
            states=list(opts["states"]),
            accounts=_split(opts["accounts"]),
            names=_split(opts["names"]),
            noheader=opts["noheader"],
            long=opts["long"],
            start=opts["start"],
            array=opts["array"],
            me=opts["me"],
            iterate=opts.get("iterate"),
            as_json=opts["as_json"],
        )
    if tool == "scancel":
        from phalanx.cli.slurm import scancel

        return scancel.run(
            list(opts["ids"]),
            users=_split(opts["users"]),
            names=_split(opts["names"]),
            states=list(opts["states"]) or None,
            partitions=_split(opts["partitions"]),
            accounts=_split(opts["accounts"]),
            signal=opts["signal"],
            batch=opts["batch"],
            full=opts["full"],
            me=opts["me"],
            quiet=opts["quiet"],
            verbose=opts["verbose"],
        )
    if tool == "sinfo":
        from phalanx.cli.slurm import sinfo

        return sinfo.run(
            fmt=opts["fmt"],
            node_oriented=opts["node_oriented"],
            partitions=_split(opts["partitions"]),
            noheader=opts["noheader"],
            long=opts["long"],
            summarize=opts["summarize"],
            states=list(opts["states"]) or None,
            reasons=opts["reasons"],
        )
    if tool == "sacct":
        from phalanx.cli.slurm import sacct

        return sacct.run(
            jobs=_split(opts["jobs"]),
            fields=opts["fields"],
            brief=opts["brief"],
            noheader=opts["noheader"],
            parsable=opts["parsable"],
            parsable2=opts["parsable2"],
            starttime=opts["starttime"],
            endtime=opts["endtime"],
            states=list(opts["states"]) or None,
            users=_split(opts["users"]),
            allusers=opts["allusers"],
            accounts=_split(opts["accounts"]),
            partitions=_split(opts["partitions"]),
            names=_split(opts["names"]),
            as_json=opts["as_json"],
            duplicates=opts["duplicates"],
            allocations=opts["allocations"],
        )
    if tool == "scontrol":
        from phalanx.cli.slurm import scontrol

        return scontrol.run(list(opts["args"]), oneliner=opts["oneliner"], details=opts["details"])
    if tool == "sprio":
        from phalanx.cli.slurm import sprio

        return sprio.run(
            jobs=list(opts["jobs"]) or None,
            users=_split(opts["users"]),
            noheader=opts["noheader"],
            long=opts["long"],
            norm=opts["norm"],
            weights=opts["weights"],
        )
    if tool == "sshare":
        from phalanx.cli.slurm import sshare

        return sshare.run(
            noheader=opts["noheader"],
            parsable=opts["parsable"],
            parsable2=opts["parsable2"],
            accounts=_split(opts["accounts"]),
            users=_split(opts["users"]),
            all_users=opts["all_users"],
            long=opts["long"],
        )
    raise ValueError(f"no fast path for {tool}")


def run(tool: str, argv: list[str]) -> int | None:
    """``phalanx TOOL ARGV`` without click: the exit status, or ``None`` when click must
    parse the command line (nothing has been done then)."""
    opts = parse(tool, argv)
    if opts is None:
        return None
    if tool == "get":
        return _get(opts)
    return call(tool, opts)


def _get(opts: dict[str, Any]) -> int | None:
    """``phalanx get jobs`` as a table or JSON; ``None`` for everything else ``get`` does."""
    args = opts["args"]
    if len(args) != 1 or args[0].lower() not in ("job", "jobs", "j"):
        return None
    output = opts["output"]
    limit = opts["limit"]
    if output not in ("table", "wide", "json") or (limit is not None and not limit.isdigit()):
        return None
    from phalanx.cli import jobtable
    from phalanx.client import Client

    with Client() as client:
        jobs = list(
            client.jobs(
                state=_split(opts["state"]),
                tenant=None if opts["all_tenants"] else _split(opts["tenant"]),
                user=_split(opts["user"]),
                queue=opts["queue"],
                limit=None if limit is None else int(limit),
            )
        )
    return jobtable.write(jobs, output)


class _SiteOnDemand:
    """The last meta-path finder of a shim's interpreter: a module nothing else finds
    (click, python-hostlist, ... in ``site-packages``) runs ``site`` once, as a normal
    start would have, and is looked for again."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
        if not _load_site():
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                return spec
        return None


def _load_site() -> bool:
    """Run ``site`` (``site-packages``, ``.pth`` files) unless done; whether it ran now."""
    if _SiteOnDemand not in sys.meta_path:
        return False
    sys.meta_path.remove(_SiteOnDemand)
    import site

    site.main()
    return True


def shim() -> int:
    """The shims' entry (``python -I -S -c ... TOOL ARGS``): the fast path when it
    applies, else ``site`` (for click and the other packages) and :func:`main`."""
    tool, argv = sys.argv[1], sys.argv[2:]
    sys.meta_path.append(_SiteOnDemand)
    from phalanx.cli.main import guarded

    code = guarded(lambda: run(tool, argv))
    if code is not None:
        return code
    _load_site()
    from phalanx.cli.main import main

    return main([tool, *argv])
