"""The repo's Kueue examples through the real kubectl alone: ``kubectl apply -f`` of the
example folder (nodes, flavors, queues and jobs, as a Kueue user applies them) on a fresh
server, every Workload finishes, the pods' logs read back, the jobs delete."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from phalanx.kubeapi.kubeconfig import kubeconfig
from phalanx.server import start_server
from tests.kubeapi.test_live import KUBECTLS

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "kueue"

pytestmark = pytest.mark.skipif(
    not KUBECTLS, reason="kubectl is not installed (the Google Cloud SDK's, or any on PATH)"
)


@pytest.mark.parametrize(
    "example", sorted(p.name for p in EXAMPLES.iterdir() if (p / "cluster.yaml").exists())
)
def test_an_example_runs_through_kubectl(example: str, tmp_path: Path) -> None:
    running = start_server(
        tmp_path / "state", port=0, kube_port=0, single_user=True, container_runtime="host"
    )
    try:
        ca = Path(json.loads((running.state_dir / "client.json").read_text())["kube_ca"])
        config = tmp_path / "kubeconfig"
        doc = kubeconfig(running.kube_url, ca, running.admin_token, "admin", "default")
        config.write_text(yaml.safe_dump(doc))
        env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(tmp_path)}

        def kubectl(*args: str) -> str:
            done = subprocess.run(
                [KUBECTLS[0], *args], env=env, capture_output=True, text=True, timeout=90
            )
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
            return done.stdout

        applied = kubectl("apply", "-f", str(EXAMPLES / example))
        assert "created" in applied
        kubectl("wait", "--for=condition=Finished", "workloads", "--all", "-A", "--timeout=60s")
        workloads = json.loads(kubectl("get", "workloads", "-A", "-o", "json"))["items"]
        assert workloads
        for wl in workloads:
            finished = {c["type"]: c for c in wl["status"]["conditions"]}["Finished"]
            assert finished["reason"] == "Succeeded", finished
        pods = json.loads(kubectl("get", "pods", "-A", "-o", "json"))["items"]
        assert pods and {p["status"]["phase"] for p in pods} == {"Succeeded"}
        first = pods[0]["metadata"]
        kubectl("logs", first["name"], "-n", first["namespace"])
        for job_file in (EXAMPLES / example).glob("job*.yaml"):
            assert "deleted" in kubectl("delete", "-f", str(job_file))
        assert json.loads(kubectl("get", "workloads", "-A", "-o", "json"))["items"] == []
    finally:
        running.stop()
