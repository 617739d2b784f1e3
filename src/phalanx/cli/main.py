"""Entry point of the ``phalanx`` command: runs the click app, renders every error as one line.

Start-up is kept fast: this module imports only the standard library, and the
commands import what they need when they run; the read-only ones (``squeue``,
``sinfo``, ``get jobs``, ...) go through :mod:`phalanx.cli.fast` without click
when their command line allows. Errors never show a traceback:
``phalanx: error: <detail>`` on standard error, exit status 1 (2 for usage).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from phalanx.errors import PhalanxError

__all__ = ["guarded", "main"]


_FAST = frozenset({"squeue", "sinfo", "sacct", "scontrol", "sprio", "sshare", "scancel", "get"})
"""The commands :mod:`phalanx.cli.fast` may run without click."""


def _error(message: str) -> None:
    color = sys.stderr.isatty() and "NO_COLOR" not in os.environ
    line = f"phalanx: error: {message}"
    sys.stderr.write(f"\x1b[31m{line}\x1b[0m\n" if color else f"{line}\n")
    sys.stderr.flush()


def _failed(exc: PhalanxError) -> int:
    """Report ``exc`` a line at a time; the exit status 1."""
    for line in exc.detail.splitlines() or [exc.error]:
        _error(line)
    return 1


def guarded(work: Callable[[], int | None]) -> int | None:
    """``work()``, with its errors reported as :func:`main` reports them (no click)."""
    from phalanx.errors import PhalanxError

    try:
        return work()
    except PhalanxError as exc:
        return _failed(exc)
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        _error(str(exc))
        return 1


def main(argv: list[str] | None = None) -> int:
    """Run ``phalanx ARGS``; returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args in (["--version"], ["-V"]):
        from phalanx import __version__

        sys.stdout.write(f"phalanx {__version__}\n")
        return 0
    if args and args[0] in _FAST:
        from phalanx.cli import fast

        done = guarded(lambda: fast.run(args[0], args[1:]))
        if done is not None:
            return done
    if args[:1] in (["srun"], ["salloc"], ["sattach"], ["sstat"]):
        # Slurm's interactive tools parse their own command lines: no click, no app.
        from importlib import import_module

        from phalanx.errors import PhalanxError

        tool = import_module(f"phalanx.cli.slurm.{args[0]}")
        try:
            code: int = tool.run(args[1:])
        except PhalanxError as exc:
            return _failed(exc)
        return code
    if args[:1] == ["sbatch"] and "--help" not in args[1:]:
        # sbatch parses its own command line, as Slurm's does: no click, no app.
        from phalanx.cli.slurm.sbatch import run
        from phalanx.errors import PhalanxError

        try:
            return run(args[1:])
        except PhalanxError as exc:
            return _failed(exc)
    return guarded(lambda: _clicked(args)) or 0


def _clicked(args: list[str]) -> int:
    """The click application, its own errors reported as :func:`main` reports them (the
    others go on to :func:`guarded`)."""
    import click

    from phalanx.cli.app import app

    try:
        result = app.main(args=args, prog_name="phalanx", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        if exc.ctx is not None:
            sys.stdout.write(exc.ctx.get_help() + "\n")
        return 0
    except click.UsageError as exc:
        hint = ""
        if exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        _error(exc.format_message() + hint)
        return 2
    except click.exceptions.Exit as exc:
        return int(exc.exit_code or 0)
    except click.Abort:
        _error("aborted")
        return 130
    except click.ClickException as exc:
        _error(exc.format_message())
        return exc.exit_code or 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
