"""Kueue's Configuration from ``phalanx up --config`` and ``apply`` sets the engine's options."""

from __future__ import annotations

from pathlib import Path

from phalanx.dialects.kueue import load_text
from phalanx.server import start_server
from tests.kueue_jobs.conftest import ADMIN, NODES

CONFIGURATION = """
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady:
  enable: true
  timeout: TIMEOUT
"""


def test_configuration_at_start_on_apply_and_after_restart(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "nodes.yaml").write_text(NODES)
    (config / "kueue.yaml").write_text(CONFIGURATION.replace("TIMEOUT", "3m"))
    state = tmp_path / "state"
    with start_server(
        state, port=0, configs=[config], preset="kueue", container_runtime="host"
    ) as server:
        wait = server.plane.config.wait_for_pods_ready
        assert wait is not None and wait.timeout_s == 180
        assert server.plane.config.preset == "kueue"
        assert server.plane.engine.config.wait_for_pods_ready == wait
        changed = load_text(CONFIGURATION.replace("TIMEOUT", "10m"), "kueue.yaml")
        assert server.plane.apply(ADMIN, changed) == [
            ("Configuration", changed[0].name, "configured")
        ]
        wait = server.plane.engine.config.wait_for_pods_ready
        assert wait is not None and wait.timeout_s == 600
    # The stored Configuration is the engine's after a restart.
    with start_server(state, port=0, preset="kueue", container_runtime="host") as server:
        wait = server.plane.engine.config.wait_for_pods_ready
        assert wait is not None and wait.timeout_s == 600
