"""The node health check on a Ray node: the program runs on the node's machine, as a
Ray task pinned to the node (``NodeAffinitySchedulingStrategy``, not soft), with no
CPU or GPU reserved, so that a busy node is checked too."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from typing import Any

__all__ = ["run_health_program"]

_remote: Any = None


def _run(argv: list[str], env: dict[str, str], timeout_s: float) -> tuple[int | None, bytes]:
    """On the node: the program's exit status (``None``: timed out) and its output."""
    try:
        done = subprocess.run(
            argv,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return None, b""
    except OSError as exc:
        return 127, f"health check could not run: {exc.strerror or exc}".encode()
    return done.returncode, done.stdout


def run_health_program(
    node_id: str, argv: Sequence[str], env: dict[str, str], timeout_s: float
) -> tuple[int | None, bytes]:
    """Run ``argv`` on the Ray node ``node_id`` with ``env`` added to its environment."""
    global _remote
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if _remote is None:
        _remote = ray.remote(_run)
    ref = _remote.options(
        num_cpus=0,
        max_retries=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(list(argv), env, timeout_s)
    result: tuple[int | None, bytes] = ray.get(ref, timeout=timeout_s + 60)
    return result
