"""The simulator stands on the engine alone: no database, no control loop, no API."""

from __future__ import annotations

import subprocess
import sys

PROBE = (
    "import sys, phalanx.sim.simulator, phalanx.sim.run; "
    "print(sorted(m for m in sys.modules if m == 'sqlalchemy' or m.startswith("
    "('phalanx.store', 'phalanx.control', 'phalanx.api', 'fastapi'))))"
)


def test_importing_the_simulator_loads_neither_the_store_nor_the_control_loop() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
