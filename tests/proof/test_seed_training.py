"""The product brief's sbatch script, end to end: 16 torch.distributed ranks on 2 virtual
nodes, inside the script's ``.sqsh`` image.

A real ``phalanx up`` with its defaults (the builtin container runtime),
``phalanx import`` of a slurm.conf, and ``phalanx sbatch`` of the script, whose
``srun --container-image`` runs ``torchrun`` with a c10d rendezvous in the image
``examples/containers/build-images.sh --python`` makes (Debian's python3, the
venv's CPU torch, ``/workspace/train_distributed.py``, which stands in for the
70B fine-tune and all-reduces across every rank with gloo).
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
from tests.images import pytorch_image
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
        server = spawn_server(state, ["--port", "0", "--no-kube-api"], env=env)
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


def example(tmp_path: Path) -> Path:
    """A copy of ``examples/slurm`` beside ``containers/out/pytorch.sqsh``, as in a checkout
    where ``examples/containers/build-images.sh --python`` ran."""
    image = pytorch_image()
    out = tmp_path / "containers" / "out"
    out.mkdir(parents=True)
    (out / "pytorch.sqsh").symlink_to(image)
    shutil.copytree(EXAMPLE, tmp_path / "slurm")
    return tmp_path / "slurm" / "llama3-70b-finetune.sbatch"


def test_the_example_trains_on_16_ranks_in_its_image(
    server: dict[str, str], tmp_path: Path
) -> None:
    script = example(tmp_path)
    # Only in the image: a copy on the host would not be what runs.
    (script.parent / "train_distributed.py").unlink()
    job_id, stderr = sbatch(server, script)
    assert job_id is not None, stderr
    assert "torchrun" not in stderr  # the fixed script draws no warning
    job = finished(server, job_id)
    out = script.parent / "logs" / f"llama3-70b-finetune-{job_id}.out"
    err = script.parent / "logs" / f"llama3-70b-finetune-{job_id}.err"
    assert (job["state"], job["exit_code"]) == ("COMPLETED", 0), err.read_text()[-3000:]
    assert err.exists()
    assert ranks(out) == sorted(str(r) for r in range(16))
    assert set(re.findall(r"rank +\d+/16 local \d+ on (\w+)", out.read_text())) == {"gpu1", "gpu2"}
    # --container-mounts: the configuration under /models is the submit dir's checkpoints/.
    assert "config: /models/configs/finetune_70b.yaml (found)" in out.read_text()


@needs_shared("examples", "seed", "llama3-70b-finetune.sbatch")
def test_the_seed_script_with_only_its_comments_and_continuations_fixed(
    server: dict[str, str], tmp_path: Path
) -> None:
    script = example(tmp_path)
    script.write_text(SEED.read_text())
    job_id, stderr = sbatch(server, script)
    assert job_id is None
    assert "line 2: `//` is not a comment" in stderr and "line 24 ends with `\\\\`" in stderr
    # The brief's paths, here: its image and the folders it mounts.
    folder = script.parent
    seed = SEED.read_text()
    image = re.search(r"--container-image=(\S+)", seed)
    assert image, "the seed script names its image"
    text = (
        "\n".join(
            ("#" + line[2:] if line.startswith("//") else line).replace("\\\\", "\\")
            for line in seed.split("\n")
        )
        .replace(image.group(1), str(pytorch_image()))
        .replace("/datasets:", f"{folder / 'datasets'}:")
        .replace("/checkpoints:", f"{folder / 'checkpoints'}:")
    )
    script.write_text(text)
    job_id, stderr = sbatch(server, script)
    assert job_id is not None, stderr
    assert "line 24: srun starts one torchrun per task" in stderr
    job = finished(server, job_id)
    out = folder / "logs" / f"llama3-70b-finetune-{job_id}.out"
    # The 16 ranks rendezvous and all-reduce; the 14 extra torchrun agents srun
    # started (one per task) fail, and the job with them, as under Slurm. Two of
    # the extra agents may meet in a later rendezvous round and run 16 ranks more
    # (it depends on when each one starts): every round that ran is whole.
    seen = ranks(out)
    rounds = len(seen) // 16
    assert rounds >= 1 and seen == sorted(str(r) for r in range(16) for _ in range(rounds))
    assert (job["state"], job["exit_code"]) == ("FAILED", 1)


def test_srun_from_a_login_shell_trains_the_example_on_two_nodes(
    server: dict[str, str], tmp_path: Path
) -> None:
    """``srun`` outside a job, as a user types it: an allocation of 2 nodes, one
    torchrun per node (8 ranks, gloo), the ranks' lines streamed back as they come
    with each node's task label (``-l``), srun's status 0, and sacct's job and step."""
    shims = tmp_path / "shims"
    subprocess.run([str(BIN / "phalanx"), "shims", str(shims)], env=server, check=True)
    env = {**server, "PATH": f"{shims}:{server['PATH']}"}
    work = tmp_path / "slurm"
    shutil.copytree(EXAMPLE, work)
    command = (
        "torchrun --nnodes=$SLURM_NNODES --nproc_per_node=4 --rdzv_id=$SLURM_JOB_ID "
        "--rdzv_backend=c10d "
        '--rdzv_endpoint=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1):29512 '
        "train_distributed.py"
    )
    done = subprocess.run(
        ["srun", "-p", "gpu-h100-dedicated", "-N2", "--ntasks-per-node=1", "--gpus-per-node=8",
         "-l", "sh", "-c", command],
        cwd=work, env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.findall(r"rank +(\d+)/8 .*?all_reduce=36 \(expected 36\)", done.stdout)
    assert sorted(found, key=int) == [str(r) for r in range(8)], done.stdout
    labelled = [line for line in done.stdout.splitlines() if "all_reduce=" in line]
    assert {line[:3] for line in labelled} == {"0: ", "1: "}, done.stdout
    job = re.search(r"rank +\d+/8 local \d on (\S+)", done.stdout)
    assert job, done.stdout
    listed = subprocess.run(
        ["sacct", "-n", "-P", "-o", "JobID,JobName,State,ExitCode", "--name", "sh"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = listed.stdout.splitlines()[-2:]
    job_id = rows[0].split("|")[0]
    assert rows == [f"{job_id}|sh|COMPLETED|0:0", f"{job_id}.0|sh|COMPLETED|0:0"], rows
