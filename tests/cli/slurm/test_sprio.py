"""``phalanx sprio``: the factor columns per preset, ``-l``, ``-n``, ``-w``, ``-j``, ``-u``,
and ``GET /api/v1/priority`` behind it, against real servers (phalanx and slurm presets)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.cli.main import main
from phalanx.cli.slurm import sprio
from phalanx.client import Client
from tests.api.server import CLUSTER, Cluster, job

GPU = "nvidia.com/gpu"

SLURM_WEIGHTS = {
    "preset": "slurm",
    "slurm": {
        "age": 1000,
        "assoc": 0,
        "fairshare": 10000,
        "jobsize": 1000,
        "partition": 1000,
        "qos": 2000,
        "tres": "GRES/gpu=3000",
    },
    "phalanx": {"age": 1.0, "share": 10.0, "qos": 5.0, "size": 1.0},
}

SLURM_JOB = {
    "id": 42,
    "partition": "gpu",
    "user": "alice",
    "priority": 7574.0,
    "preset": "slurm",
    "factors": {
        "site": 0.0,
        "age": 214.2857,
        "assoc": 0.0,
        "fairshare": 6000.0,
        "jobsize": 40.0,
        "partition": 1000.0,
        "qos": 200.0,
        "tres": 120.0,
        "tres:gres/gpu": 120.0,
        "nice": 0.0,
    },
}

PHALANX_JOB = {
    "id": 7,
    "partition": "team-a",
    "user": "bob",
    "priority": 14.5,
    "preset": "phalanx",
    "factors": {"age": 4.6, "share": 10.0, "qos": 0.0, "size": -0.1},
}

KUEUE_JOB = {
    "id": 9,
    "partition": "k",
    "user": "carol",
    "priority": 100.0,
    "preset": "kueue",
    "factors": {"priority": 100.0},
}

HEADER = (
    "          JOBID PARTITION   PRIORITY       SITE        AGE      ASSOC  FAIRSHARE"
    "    JOBSIZE  PARTITION        QOS TRES                "
)


def test_slurm_job_shows_the_weighted_factors() -> None:
    lines = sprio.format_jobs([SLURM_JOB], SLURM_WEIGHTS).splitlines()
    assert lines == [
        HEADER,
        "             42 gpu             7574          0        214          0       6000"
        "         40       1000        200 gres/gpu=120        ",
    ]


def test_normalized_factors_are_the_factors_before_their_weights() -> None:
    (line,) = sprio.format_jobs([SLURM_JOB], SLURM_WEIGHTS, header=False, norm=True).splitlines()
    values = line.split()
    assert values[0:2] == ["42", "gpu"]
    assert float(values[2]) == pytest.approx(7574 / (2**32 - 1), abs=1e-7)
    assert [float(v) for v in values[3:10]] == pytest.approx(
        [0.0, 0.2142857, 0.0, 0.6, 0.04, 1.0, 0.1], abs=1e-7
    )
    assert values[10] == "gres/gpu=0.04"


def test_long_adds_user_and_nice() -> None:
    lines = sprio.format_jobs([SLURM_JOB], SLURM_WEIGHTS, long=True).splitlines()
    assert lines[0].split() == [
        "JOBID",
        "PARTITION",
        "USER",
        "PRIORITY",
        "SITE",
        "AGE",
        "ASSOC",
        "FAIRSHARE",
        "JOBSIZE",
        "PARTITION",
        "QOS",
        "NICE",
        "TRES",
    ]
    assert lines[1].split()[2] == "alice"
    assert lines[1].split()[11] == "0"


def test_other_presets_fill_the_columns_they_have() -> None:
    lines = sprio.format_jobs([PHALANX_JOB, KUEUE_JOB], SLURM_WEIGHTS, header=False).splitlines()
    assert lines[0] == (
        "              7 team-a          14.5                   4.6                    10"
        "       -0.1                     0                     "
    )
    assert lines[1].split() == ["9", "k", "100"]


def test_weights_line() -> None:
    lines = sprio.format_weights(SLURM_WEIGHTS).splitlines()
    assert lines == [
        HEADER,
        "        Weights                               1       1000          0      10000"
        "       1000       1000       2000 gres/gpu=3000       ",
    ]
    phalanx = sprio.format_weights({**SLURM_WEIGHTS, "preset": "phalanx"}, header=False)
    assert phalanx.split() == ["Weights", "1", "10", "1", "5"]


# --------------------------------------------------------------------------- servers


def _big_job(**fields: object) -> dict[str, object]:
    """More H100s than team-a could ever get: it stays pending."""
    body = job(["true"], requests={GPU: 8, "cpu": "1"}, **fields)
    body["podSets"][0].update(count=4, tasksPerNode=1)  # type: ignore[index]
    return body


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def as_admin(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("PHALANX_URL", cluster.url)
    monkeypatch.setenv("PHALANX_TOKEN", cluster.admin_token)
    return cluster


def test_sprio_against_the_phalanx_preset(
    as_admin: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with as_admin.alice as alice:
        mine = alice.submit(_big_job(tenant="team-a"))
    try:
        code, out, err = _run(capsys, "sprio", "-j", str(mine))
        assert code == 0, err
        header, line = out.splitlines()
        assert header == HEADER
        values = line.split()
        assert values[:2] == [str(mine), "team-a"]
        # age, share, qos and size: phalanx's four terms under AGE, FAIRSHARE, QOS, JOBSIZE.
        assert len(values) == 7
        with as_admin.alice as alice:
            answer = alice.priority(ids=[mine])
        (item,) = answer["jobs"]
        assert item["preset"] == "phalanx" and set(item["factors"]) == {
            "age",
            "share",
            "qos",
            "size",
        }
        assert sum(item["factors"].values()) == pytest.approx(item["priority"])
        assert answer["weights"]["preset"] == "phalanx"
        # Bob's token sees none of team-a's jobs.
        with as_admin.bob as bob:
            assert bob.priority(ids=[mine])["jobs"] == []
        code, out, _ = _run(capsys, "sprio", "-h", "-u", "alice")
        assert [line.split()[0] for line in out.splitlines()] == [str(mine)]
        code, out, _ = _run(capsys, "sprio", "-h", "-u", "nobody")
        assert out == ""
        code, out, _ = _run(capsys, "sprio", "-w")
        assert out.splitlines()[1].split() == ["Weights", "1", "40", "1", "5"]
        code, out, err = _run(capsys, "sprio", "-j", "999999")
        assert (code, err) == (1, "Unable to find jobs matching user/id(s) specified\n")
    finally:
        with as_admin.alice as alice:
            alice.cancel(mine)


@pytest.fixture(scope="module")
def slurm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    from phalanx.server import start_server

    state = tmp_path_factory.mktemp("slurm-state")
    server = start_server(state, port=0, configs=[CLUSTER], preset="slurm")
    try:
        yield server.url, server.admin_token, state
    finally:
        server.stop()


def test_sprio_against_the_slurm_preset(
    slurm_server: tuple[str, str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, token, state = slurm_server
    monkeypatch.setenv("PHALANX_URL", url)
    monkeypatch.setenv("PHALANX_TOKEN", token)
    with Client(url, token, state_dir=state) as admin:
        job_id = admin.submit(_big_job(tenant="team-a"))
        answer = admin.priority(ids=[job_id])
    (item,) = answer["jobs"]
    assert item["preset"] == "slurm"
    factors = item["factors"]
    weights = answer["weights"]["slurm"]
    assert {"site", "age", "assoc", "fairshare", "jobsize", "partition", "qos", "tres", "nice"} <= (
        set(factors)
    )
    # One partition factor of 1 (the default): the partition term is its whole weight.
    assert factors["partition"] == weights["partition"]
    assert 0 < factors["jobsize"] <= weights["jobsize"]
    total = sum(v for k, v in factors.items() if k not in ("nice",) and ":" not in k)
    assert item["priority"] == max(1, int(total - factors["nice"]))
    code, out, err = _run(capsys, "sprio", "-l", "-j", str(job_id))
    assert code == 0, err
    line = out.splitlines()[1].split()
    assert line[0] == str(job_id) and int(line[3]) == item["priority"]
    code, out, _ = _run(capsys, "sprio", "-w", "-h")
    assert out.split()[:2] == ["Weights", "1"]
    code, out, _ = _run(capsys, "presets")
    assert "slurm" in out.split()
