"""The real Slurm 22.05 peer (``../shared/peers/slurm``), started once per session.

The tests here skip only when its scripts are absent (no ../shared) or the peer cannot
be installed or started; everything else is a failure. The daemons are stopped at the
end of the session, also when a test fails.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.shared import require_shared, shared_path

PEER = shared_path("peers", "slurm")
START = PEER / "start-slurm.sh"
STOP = PEER / "stop-slurm.sh"
SLURM_TOOLS = ("sbatch", "squeue", "sacct", "scancel", "sinfo")


def _tail(text: str | bytes | None, lines: int = 20) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").splitlines()[-lines:])


def _stop() -> None:
    subprocess.run(["bash", str(STOP)], capture_output=True, timeout=180, check=False)


def _wait_idle(timeout: float = 60) -> None:
    """Until sinfo shows the 4 nodes idle; skip (the peer did not start) otherwise."""
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, check=False
        )
        out = done.stdout + done.stderr
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        if len(states) == 4 and all(s == "idle" for s in states.values()):
            return
        time.sleep(0.5)
    pytest.skip(f"Slurm peer started but its nodes are not idle after {timeout} s: {out}")


@pytest.fixture(scope="session")
def slurm_peer() -> Iterator[Path]:
    """Start the 4-node peer (gpu[1-4], partition ``gpu``); yield its directory; stop it."""
    for script in (START, STOP):
        require_shared("peers", "slurm", script.name)
    have_tools = all(shutil.which(tool) for tool in SLURM_TOOLS)
    if not have_tools and not (shutil.which("apt-get") and shutil.which("dpkg")):
        pytest.skip("Slurm peer cannot be installed: no Slurm tools and no apt-get/dpkg")
    try:
        started = subprocess.run(
            ["bash", str(START)], capture_output=True, text=True, timeout=600, check=False
        )
    except subprocess.TimeoutExpired as exc:
        _stop()
        pytest.skip(f"Slurm peer did not start within 600 s: {_tail(exc.stdout)}")
    if started.returncode != 0:
        _stop()
        pytest.skip(
            f"Slurm peer failed to start (rc {started.returncode}):\n"
            f"{_tail(started.stdout)}\n{_tail(started.stderr)}"
        )
    try:
        if not all(shutil.which(tool) for tool in SLURM_TOOLS):
            pytest.skip("Slurm peer started but its client tools are not on PATH")
        _wait_idle()
        yield PEER
    finally:
        _stop()
