"""``scontrol`` inside a batch job: the hostlist commands answered locally, fast.

``scontrol show hostnames [LIST]`` (default ``$SLURM_JOB_NODELIST``, one name
per line), ``scontrol show hostlist LIST`` (compressed in the given order, no
sorting or dedup, as Slurm) and ``scontrol show hostlistsorted LIST``. Anything
else is handed to the full tool: ``python -I -m phalanx.cli.main scontrol ARGS``.

Run as ``python -I -m phalanx.runtime.scontrol``; standard library,
:mod:`hostlist`, :mod:`phalanx.dialects.slurm.environment` and
:mod:`phalanx.dialects.slurm.hostlists` only.
"""

from __future__ import annotations

import os
import sys

import hostlist

from phalanx.dialects.slurm.environment import compress_hostlist
from phalanx.dialects.slurm.hostlists import BadHostlist, expand_hostlist

__all__ = ["answer_locally", "main"]


def _expand(expression: str) -> list[str]:
    # Slurm accepts whitespace as a separator too, and the expansion is bounded.
    return expand_hostlist(expression, allow_duplicates=True)


def answer_locally(args: list[str]) -> int | None:
    """Answer ``show hostnames|hostlist|hostlistsorted``; None for anything else."""
    if len(args) < 2 or args[0] != "show":
        return None
    what = args[1]
    if what not in ("hostnames", "hostname", "hostlist", "hostlistsorted"):
        return None
    if len(args) > 2:
        expression = " ".join(args[2:])
    elif what.startswith("hostname"):
        expression = os.environ.get("SLURM_JOB_NODELIST", "")
        if not expression:
            print("scontrol: error: host list is empty", file=sys.stderr)
            return 1
    else:
        print(f"scontrol: error: {what} requires a host list", file=sys.stderr)
        return 1
    try:
        names = _expand(expression)
    except BadHostlist as exc:
        print(f"scontrol: error: Invalid hostlist: {expression} ({exc.detail})", file=sys.stderr)
        return 1
    if what.startswith("hostname"):
        sys.stdout.write("".join(f"{name}\n" for name in names))
    elif what == "hostlist":
        print(compress_hostlist(names))
    else:
        print(compress_hostlist(hostlist.numerically_sorted(names)))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: the local fast path, or exec the full ``phalanx scontrol``."""
    args = sys.argv[1:] if argv is None else argv
    code = answer_locally(args)
    if code is not None:
        return code
    command = [sys.executable, "-I", "-m", "phalanx.cli.main", "scontrol", *args]
    sys.stdout.flush()
    os.execv(sys.executable, command)
    return 1  # pragma: no cover - execv does not return


if __name__ == "__main__":
    sys.exit(main())
