"""One srun task on another Ray node: ``python -I -m phalanx.runtime.ray.proxy AGENT -- CMD...``.

Under the Ray runtime, ``srun`` starts this module in place of every task that
belongs on another node (as ``mpirun`` starts ``ssh``): it connects to the Ray
cluster (``PHALANX_RAY_ADDRESS``), asks that node's agent
(:class:`~phalanx.runtime.ray.agent.NodeAgent`, named ``AGENT``) to run the
command there with this process's environment (whose ``PHALANX_RAY_ATTEMPT``
names the job attempt) and working directory, copies
the task's output to its own stdout and stderr as it comes, forwards the
signals it gets (srun's forwarding, the supervisor's SIGTERM on cancel), and
ends as the task ended: the same exit code, or killed by the same signal. So
srun, its ``-o``/``-l`` handling, ``--kill-on-bad-exit`` and exit status work
unchanged.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

__all__ = ["main"]

FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCONT,
    signal.SIGQUIT,
)
READ_WAIT_S = 0.5


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BrokenPipeError:
            return
        view = view[written:]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print("usage: python -I -m phalanx.runtime.ray.proxy AGENT -- COMMAND...", file=sys.stderr)
        return 2
    name, command = args[0], args[2:]
    from phalanx.runtime.ray.connect import connect

    try:
        connect(os.environ["PHALANX_RAY_ADDRESS"], quiet=True)
        import ray

        agent: Any = ray.get_actor(name, namespace=os.environ.get("PHALANX_RAY_NAMESPACE"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        key = ray.get(agent.step_start.remote(command, env, os.getcwd()))
    except Exception as exc:
        print(f"srun: error: cannot start the task on {name}: {exc}", file=sys.stderr)
        return 1
    pending: list[int] = []
    for signum in FORWARDED:
        signal.signal(signum, lambda s, f: pending.append(s))
    out_at = err_at = 0
    while True:
        while pending:
            agent.step_signal.remote(key, pending.pop(0))
        try:
            out, err, code = ray.get(agent.step_read.remote(key, out_at, err_at, READ_WAIT_S))
        except Exception as exc:
            print(f"srun: error: lost the task on {name}: {exc}", file=sys.stderr)
            return 1
        if out:
            _write(1, out)
            out_at += len(out)
        if err:
            _write(2, err)
            err_at += len(err)
        if code is not None:
            break
    ray.shutdown()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
