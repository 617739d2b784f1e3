"""A small, single-threaded process that forks job supervisors on request.

Starting a supervisor with ``python -m phalanx.runtime.supervisor`` costs a
fresh interpreter (tens of milliseconds of CPU) per job; forking one from a
process that has already imported the supervisor costs about a millisecond.
The local runtime starts one fork server (``python -I -m
phalanx.runtime.forkserver``) and writes one job directory per line to its
standard input; the server answers ``ok PID`` or ``error MESSAGE`` per line.

A forked supervisor is already not the control plane's child: it only calls
``setsid`` and supervises (:func:`phalanx.runtime.supervisor.forked`), without
the second fork a directly started one needs, so it survives both the fork
server (whose children the kernel reaps) and the control plane. Requests may
be written ahead of the answers: the runtime does not wait for one before it
sends the next. The server exits when its standard input closes, that is when
the control plane goes, after starting every request it was sent (when the
control plane was killed, unanswered). Standard library only, like the supervisor.

A line ``--foreground DIR`` starts the supervisor of ``DIR`` with ``--foreground``
instead (the Ray runtime's node agents do): it stays the fork server's child, and
the fork server's end (its agent's) counts as the node's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import TextIO

from phalanx.runtime import supervisor


def _spawn(jobdir: str, foreground: bool = False) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(
            os.path.join(jobdir, "supervisor.log"),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
            0o644,
        )
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, 1 << 16)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - process-wide streams
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        code = (
            supervisor.main(["--foreground", jobdir]) if foreground else supervisor.forked(jobdir)
        )
    except BaseException as exc:  # the child must never return into the server's loop
        with contextlib.suppress(OSError):
            os.write(2, f"forkserver: {exc!r}\n".encode())
    finally:
        os._exit(code)


def main() -> int:
    # Children are reaped by the kernel: the server never waits for a supervisor.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out: TextIO | None = sys.stdout
    for line in sys.stdin:
        jobdir = line.strip()
        foreground = jobdir.startswith("--foreground ")
        if foreground:
            jobdir = jobdir.removeprefix("--foreground ").strip()
        if not jobdir:
            continue
        try:
            pid = _spawn(jobdir, foreground)
        except OSError as exc:
            answer = f"error {exc}\n"
        else:
            answer = f"ok {pid}\n"
        if out is None:
            continue
        try:
            out.write(answer)
            out.flush()
        except OSError:
            # The runtime is gone (killed): what it asked for was committed before it
            # was sent, so the rest of its requests are still started, unanswered.
            out = None
    return 0


if __name__ == "__main__":
    sys.exit(main())
