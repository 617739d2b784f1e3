"""The engine's decisions on the golden workloads are the recorded ones.

``bench/goldens.json`` holds a digest of every decision the engine makes on the
Kueue conformance scenarios and on ``bench/engine.py``'s workload (scaled down)
under each preset. Moving code must not change them; a change meant to change
decisions records them again (``python bench/goldens.py record
bench/goldens.json``) and says why in its commit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_decides_as_recorded() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "goldens.py"),
            "check",
            str(ROOT / "bench" / "goldens.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    changed = {name: r for name, r in report["workloads"].items() if not r["same"]}
    assert not changed, (
        "decisions differ from bench/goldens.json (record them again only if the change "
        f"is meant to alter decisions): {json.dumps(changed, indent=1)}"
    )
    assert done.returncode == 0, done.stderr
