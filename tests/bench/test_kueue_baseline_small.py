"""The Kueue baseline benchmark at a tiny scale: a real ``phalanx up --runtime noop``.

Checks that the harness runs end to end, that every workload finished, and the
report's shape and internal consistency; timing is not checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "kueue_baseline.py"


def test_kueue_baseline_at_scale_0_02_finishes_every_workload() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--scale", "0.02", "--json", "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["benchmark"] == "kueue-baseline"
    assert out["scale"] == 0.02
    result = out["phalanx"]
    # 30 ClusterQueues x (7 small + 2 medium + 1 large) at this scale.
    assert result["workloads"] == 300
    assert result["finished"] == 300
    assert result["states"] == {"COMPLETED": 300}
    assert result["all_finished"] is True
    assert result["wall_s"] > 0
    # The bound: the last workload (a large one, 1 s) is created at t=0 and the
    # work per cohort is 6 x (7 x 0.2 + 2 x 2.5 + 20) cpu-s over 120 cpu.
    assert abs(result["lower_bound_s"] - 6 * (7 * 0.2 + 2 * 2.5 + 20) / 120) < 0.2
    assert result["wall_s"] >= result["lower_bound_s"] * 0.99
    assert set(result["avg_time_to_admission_s"]) == {"small", "medium", "large"}
    assert all(v >= 0 for v in result["avg_time_to_admission_s"].values())
    usage = result["cq_usage_percent"]
    assert 0 < usage["min"] <= usage["avg"] <= usage["max"] <= 100 * 120 / 20
    assert set(result["vs_kueue"]["admission_speedup"]) == {"small", "medium", "large"}
    assert result["control_loop"]["cycles"] > 0
    assert set(result["goal"]) == {
        "wall_within_10_percent_of_lower_bound",
        "admission_10x_lower_than_kueue",
    }
