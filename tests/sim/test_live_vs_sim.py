"""The simulator predicts the live system: the same small trace through a real
``phalanx up`` (no-op runtime: each job is a timer of its duration) and through
``phalanx.sim`` gives the same admissions, in the same order, on the same nodes."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import yaml

from phalanx.control.spawn import spawn_server
from phalanx.dialects.kueue import to_manifest
from phalanx.sim.setup import Cluster, pod_sets, scenario
from phalanx.sim.simulator import Simulator
from phalanx.sim.trace import TimeLimitRule, TraceJob
from phalanx.sim.traces.accounting import load_accounting

# (GPUs, seconds), all submitted at once, in this order; ends at least 0.2 s apart.
TRACE = [(4, 1.0), (8, 2.0), (2, 0.5), (16, 1.0), (1, 0.7), (8, 1.5), (3, 0.3), (4, 2.4), (12, 0.6)]


def test_a_live_control_plane_and_the_simulator_admit_alike(tmp_path: Path) -> None:
    jobs = TimeLimitRule().apply(
        [TraceJob(i, 0.0, seconds, gpus, "team") for i, (gpus, seconds) in enumerate(TRACE, 1)]
    )
    setup = scenario(Cluster.shared_pool(2, {"team": 1.0}), "fifo")
    predicted = Simulator(setup, jobs).run()
    expected = [
        (o.job.id, tuple(sorted(o.nodes)))
        for o in sorted(predicted.outcomes, key=lambda o: (o.start, o.job.id))
    ]

    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump_all([to_manifest(type(o).__name__, o) for o in setup.objects]))
    server = spawn_server(
        tmp_path / "state",
        [
            *("--port", "0", "--runtime", "noop", "--preset", "kueue"),
            *("--heads-per-cycle", "all", "--placement", "tight", "--config", str(config)),
        ],
    )
    try:
        http = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}, timeout=30
        )
        for job in jobs:
            body = {
                "tenant": "team",
                "clusterQueue": "all",
                "podSets": [
                    p.model_dump(by_alias=True, exclude_defaults=True) for p in pod_sets(job.gpus)
                ],
                "run": {"command": ["sleep", str(job.duration)], "workingDir": str(tmp_path)},
            }
            r = http.post("/api/v1/jobs", json=body)
            assert r.status_code == 201, r.text
            assert r.json()["id"] == job.id
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            live = [http.get(f"/api/v1/jobs/{job.id}").json() for job in jobs]
            if all(j["end_time"] for j in live):
                break
            time.sleep(0.2)
        assert all(j["state"] == "COMPLETED" for j in live), live
        admitted = []
        for job in jobs:
            events = http.get(f"/api/v1/jobs/{job.id}/events").json()["items"]
            [event] = [e for e in events if e["kind"] == "Admitted"]
            admitted.append((event["time"], job.id, tuple(sorted(event["data"]["nodes"]))))
        actual = [(job_id, nodes) for _, job_id, nodes in sorted(admitted)]
    finally:
        server.stop()
    assert actual == expected
    # What ran live is a trace too (--trace accounting:STATE_DIR).
    replayed = load_accounting(str(tmp_path / "state"))
    held = [sum(p.count * p.requests["nvidia.com/gpu"] for p in pod_sets(j.gpus)) for j in jobs]
    assert [(j.id, j.gpus, j.tenant) for j in replayed] == [
        (j.id, gpus, "team") for j, gpus in zip(jobs, held, strict=True)
    ]  # the GPUs each job held: 16 for the 12-GPU job on two whole nodes
    for ran, planned in zip(replayed, jobs, strict=True):
        assert abs(ran.duration - planned.duration) < 0.5
