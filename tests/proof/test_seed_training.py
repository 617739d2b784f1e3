"""The product brief's sbatch script, end to end: 16 torch.distributed ranks on 2 virtual nodes.

A real ``phalanx up`` (with ``--container-runtime host``, since the script's
``srun`` names a container image), ``phalanx import`` of a slurm.conf, and
``phalanx sbatch`` of the script, which runs ``srun torchrun`` with a c10d
rendezvous; ``examples/slurm/train_distributed.py`` stands in for the 70B
fine-tune and all-reduces across every rank (gloo, on the CPU).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from phalanx.control.spawn import spawn_server
from phalanx.errors import PhalanxError
from phalanx.runtime.local import NSS_WRAPPER
from tests.needs import require
from tests.shared import needs_shared, shared_path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "slurm"
SEED = shared_path("examples", "seed", "llama3-70b-finetune.sbatch")
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require(importlib.util.find_spec("torch") is not None, "torch (pip install torch==2.13.0)")
    require(NSS_WRAPPER is not None, "nss_wrapper (Debian package libnss-wrapper)")
    state = tmp_path_factory.mktemp("state")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    try:
        server = spawn_server(state, ["--port", "0", "--container-runtime", "host"], env=env)
    except PhalanxError as exc:
        pytest.fail(exc.detail)
    env.update(PHALANX_URL=server.url, PHALANX_TOKEN=server.token)
    subprocess.run(
        [str(BIN / "phalanx"), "import", str(EXAMPLE / "slurm.conf")], env=env, check=True
    )
    yield env
    server.stop()


def sbatch(env: dict[str, str], script: Path) -> tuple[int | None, str]:
    done = subprocess.run(
        [str(BIN / "phalanx"), "sbatch", script.name],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
    )
    match = re.search(r"Submitted batch job (\d+)", done.stdout)
    return (int(match.group(1)) if match else None), done.stderr


def finished(env: dict[str, str], job_id: int, timeout: float = 400) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {env['PHALANX_TOKEN']}"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = httpx.get(f"{env['PHALANX_URL']}/api/v1/jobs/{job_id}", headers=headers).json()
        if job["end_time"]:
            return dict(job)
        time.sleep(1)
    raise AssertionError(f"job {job_id} did not finish in {timeout} s: {job}")


def ranks(log: Path) -> list[str]:
    # Workers write unbuffered, so two ranks' lines can interleave: match, don't split.
    found = re.findall(r"rank +(\d+)/16 .*?all_reduce=136 \(expected 136\)", log.read_text())
    return sorted(found)


def workdir(tmp_path: Path, script: str) -> Path:
    (tmp_path / "job.sbatch").write_text(script)
    shutil.copy(EXAMPLE / "train_distributed.py", tmp_path)
    return tmp_path / "job.sbatch"


def test_the_example_trains_on_16_ranks(server: dict[str, str], tmp_path: Path) -> None:
    script = workdir(tmp_path, (EXAMPLE / "llama3-70b-finetune.sbatch").read_text())
    job_id, stderr = sbatch(server, script)
    assert job_id is not None, stderr
    assert "torchrun" not in stderr  # the fixed script draws no warning
    job = finished(server, job_id)
    out = tmp_path / "logs" / f"llama3-70b-finetune-{job_id}.out"
    err = tmp_path / "logs" / f"llama3-70b-finetune-{job_id}.err"
    assert (job["state"], job["exit_code"]) == ("COMPLETED", 0), err.read_text()[-3000:]
    assert err.exists()
    assert ranks(out) == sorted(str(r) for r in range(16))
    assert set(re.findall(r"rank +\d+/16 local \d+ on (\w+)", out.read_text())) == {"gpu1", "gpu2"}


@needs_shared("examples", "seed", "llama3-70b-finetune.sbatch")
def test_the_seed_script_with_only_its_comments_and_continuations_fixed(
    server: dict[str, str], tmp_path: Path
) -> None:
    verbatim = workdir(tmp_path, SEED.read_text())
    job_id, stderr = sbatch(server, verbatim)
    assert job_id is None
    assert "line 2: `//` is not a comment" in stderr and "line 24 ends with `\\\\`" in stderr
    text = "\n".join(
        ("#" + line[2:] if line.startswith("//") else line).replace("\\\\", "\\")
        for line in SEED.read_text().split("\n")
    ).replace("/workspace/train_distributed.py", '"$SLURM_SUBMIT_DIR/train_distributed.py"')
    script = workdir(tmp_path, text)
    job_id, stderr = sbatch(server, script)
    assert job_id is not None, stderr
    assert "line 24: srun starts one torchrun per task" in stderr
    job = finished(server, job_id)
    out = tmp_path / "logs" / f"llama3-70b-finetune-{job_id}.out"
    # The 16 ranks rendezvous and all-reduce; the 14 extra torchrun agents srun
    # started (one per task) fail, and the job with them, as under Slurm.
    assert ranks(out) == sorted(str(r) for r in range(16))
    assert (job["state"], job["exit_code"]) == ("FAILED", 1)
