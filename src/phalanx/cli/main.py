"""Entry point of the ``phalanx`` command.

Start-up is kept fast: subcommands import what they need when they run.
"""

from __future__ import annotations

import sys

USAGE = """\
usage: phalanx [--version] <command> [args]

commands:
  version      print the phalanx version
  presets      list the scheduling policy presets
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0
    command = args[0]
    if command in ("--version", "version"):
        from phalanx import __version__

        sys.stdout.write(f"phalanx {__version__}\n")
        return 0
    if command == "presets":
        from phalanx.engine.config import PRESETS

        sys.stdout.write("\n".join(PRESETS) + "\n")
        return 0
    sys.stderr.write(f"phalanx: unknown command {command!r}\n{USAGE}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
