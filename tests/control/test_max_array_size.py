"""slurm.conf's MaxArraySize: the server refuses array indices at or above its own
(Slurm's default 1001 without one), and ``phalanx sbatch`` leaves that check to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.cli.main import main
from phalanx.client import Client
from phalanx.dialects.slurm.scheduling import read_scheduling
from phalanx.errors import Invalid
from tests.api.server import CLUSTER

SCRIPT = "#!/bin/sh\n#SBATCH --hold\ntrue\n"


def _server(state: Path, configs: list[Path]) -> object:
    from phalanx.server import start_server

    # Nothing runs (noop runtime) and every job is held: 4001 tasks cost only their rows.
    return start_server(state, port=0, configs=[CLUSTER, *configs], runtime="noop")


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    root = tmp_path_factory.mktemp("big")
    conf = root / "slurm.conf"
    conf.write_text("# only the array limit\nMaxArraySize=5000\n")
    server = _server(root / "state", [conf])
    try:
        yield server
    finally:
        server.stop()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    root = tmp_path_factory.mktemp("default")
    server = _server(root / "state", [])
    try:
        yield server
    finally:
        server.stop()  # type: ignore[attr-defined]


def _sbatch(
    server: object,
    array: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *extra: str,
) -> tuple[int, str, str]:
    monkeypatch.setenv("PHALANX_URL", server.url)  # type: ignore[attr-defined]
    monkeypatch.setenv("PHALANX_TOKEN", server.admin_token)  # type: ignore[attr-defined]
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT)
    code = main(["sbatch", "--parsable", "-A", "team-a", "-p", "team-a", f"--array={array}",
                 *extra, str(script)])  # fmt: skip
    out, err = capsys.readouterr()
    return code, out, err


def test_max_array_size_is_read_from_slurm_conf() -> None:
    assert read_scheduling("MaxArraySize=5000\n") == {"max_array_size": 5000}
    assert read_scheduling("maxarraysize=0\n") == {"max_array_size": 0}
    assert read_scheduling("MaxArraySize=4000001\n") == {"max_array_size": 4000001}
    for value, message in [
        ("4000002", "slurm.conf:1: MaxArraySize=4000002: too large (at most 4000001, as in"),
        ("-1", "slurm.conf:1: MaxArraySize=-1: expected a whole number"),
        ("1e3", "slurm.conf:1: MaxArraySize=1e3: expected a whole number"),
        ("9" * 30, "slurm.conf:1: MaxArraySize=999999999999999999999999: too large"),
    ]:
        with pytest.raises(Invalid) as error:
            read_scheduling(f"MaxArraySize={value}\n")
        assert error.value.detail.startswith(message), error.value.detail


def test_a_server_with_max_array_size_5000_takes_0_to_4000_and_refuses_5000(
    big: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert big.plane.config.max_array_size == 5000  # type: ignore[attr-defined]
    code, out, err = _sbatch(big, "0-4000", tmp_path, monkeypatch, capsys)
    assert (code, err) == (0, ""), err
    first = int(out.split(";")[0])
    with Client(big.url, big.admin_token) as client:  # type: ignore[attr-defined]
        tasks = list(client.jobs(array_job_id=first))
    assert len(tasks) == 4001
    assert {t["state"] for t in tasks} == {"PENDING"}
    assert sorted(t["array_task_id"] for t in tasks) == list(range(4001))

    code, out, err = _sbatch(big, "4999", tmp_path, monkeypatch, capsys)
    assert (code, err) == (0, ""), err  # the largest index below 5000
    code, out, err = _sbatch(big, "4990-5000", tmp_path, monkeypatch, capsys)
    assert code == 1 and out == ""
    assert err == (
        "sbatch: error: Batch job submission failed: array: Invalid job array specification: "
        "--array=4990-5000: index 5000 is above the maximum 4999 (MaxArraySize=5000)\n"
    )
    code, out, err = _sbatch(big, "5000", tmp_path, monkeypatch, capsys)
    assert code == 1 and "index 5000 is above the maximum 4999 (MaxArraySize=5000)" in err


def test_a_server_without_max_array_size_refuses_1001(
    default: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert default.plane.config.max_array_size == 1001  # type: ignore[attr-defined]
    code, out, err = _sbatch(default, "0-1000", tmp_path, monkeypatch, capsys)
    assert (code, err) == (0, ""), err
    code, out, err = _sbatch(default, "0-1001", tmp_path, monkeypatch, capsys)
    assert code == 1 and out == ""
    assert err == (
        "sbatch: error: Batch job submission failed: array: Invalid job array specification: "
        "--array=0-1001: index 1001 is above the maximum 1000 (MaxArraySize=1001)\n"
    )
    # --test-only asks the server too; the API answers a submission without the text.
    code, out, err = _sbatch(default, "1001", tmp_path, monkeypatch, capsys, "--test-only")
    assert code == 1 and "index 1001 is above the maximum 1000 (MaxArraySize=1001)" in err
    job = {
        "tenant": "team-a",
        "clusterQueue": "team-a",
        "hold": True,
        "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "1"}}],
        "run": {"command": ["true"], "workingDir": "/tmp"},
        "array": {"indices": [0, 1001]},
    }
    client = Client(default.url, default.admin_token)  # type: ignore[attr-defined]
    with client, pytest.raises(Invalid) as error:
        client.submit(job)
    assert error.value.detail == (
        "array: Invalid job array specification: array.indices: index 1001 is above the "
        "maximum 1000 (MaxArraySize=1001)"
    )


def test_max_array_size_0_disables_arrays(tmp_path: Path) -> None:
    from phalanx.server import start_server

    conf = tmp_path / "slurm.conf"
    conf.write_text("MaxArraySize=0\n")
    server = start_server(tmp_path / "state", port=0, configs=[CLUSTER, conf], runtime="noop")
    job = {
        "tenant": "team-a",
        "clusterQueue": "team-a",
        "hold": True,
        "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "1"}}],
        "run": {"command": ["true"], "workingDir": "/tmp"},
        "array": {"indices": [0], "text": "0"},
    }
    try:
        with Client(server.url, server.admin_token) as client:
            with pytest.raises(Invalid) as error:
                client.submit(job)
            disabled = "--array=0: job arrays are disabled (MaxArraySize=0)"
            assert error.value.detail.endswith(disabled)
            assert client.submit({**job, "array": None}) > 0
    finally:
        server.stop()
