"""Run a command in a container: ``python -I -m phalanx.runtime.containers.exec SPEC -- ARGV``.

``SPEC`` is the container's JSON (inline, or ``@FILE``; see
:func:`phalanx.runtime.containers.enter.enter`). This process enters the
container and execs ``ARGV`` there, so the command is the process its caller
started: same pid, same process group, its signals and exit status.

Exit status before the command runs, as ``docker run`` and ``podman run``
give it: 125 when the container cannot be set up, 126 when the command cannot
be run, 127 when it is not found; the reason goes to standard error, prefixed
with the spec's ``errorPrefix`` (``slurmstepd: error: pyxis:`` for Slurm
steps).
"""

from __future__ import annotations

import contextlib
import os
import sys

from phalanx.runtime.containers.enter import ContainerError, enter, load_spec

SETUP_FAILED = 125
CANNOT_RUN = 126
NOT_FOUND = 127


def _say(prefix: str, message: str) -> None:
    data = f"{prefix} {message}\n".encode(errors="replace")
    with contextlib.suppress(OSError):
        os.write(2, data)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        _say("phalanx:", "usage: python -I -m phalanx.runtime.containers.exec SPEC -- ARGV")
        return SETUP_FAILED
    prefix = "phalanx: container:"
    try:
        spec = load_spec(args[0])
        prefix = str(spec.get("errorPrefix") or prefix)
        env = enter(spec)
    except (ContainerError, OSError, ValueError, KeyError) as exc:
        _say(prefix, str(exc))
        return SETUP_FAILED
    command = args[2:]
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        _say(prefix, f"{command[0]}: no such file or directory in the container")
        return NOT_FOUND
    except OSError as exc:
        _say(prefix, f"{command[0]}: cannot run it: {exc.strerror}")
        return CANNOT_RUN
    return CANNOT_RUN  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    sys.exit(main())
