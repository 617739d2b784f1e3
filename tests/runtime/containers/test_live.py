"""Jobs in their images through a real ``phalanx up`` with its defaults: ``srun
--container-*`` (pyxis' semantics) in sbatch scripts, Kubernetes Jobs by
Kubernetes' rules, against images made here with busybox-static and imported with
``phalanx image import``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from phalanx.control.spawn import spawn_server
from phalanx.errors import PhalanxError
from tests.runtime.containers.images_support import (
    busybox_rootfs,
    oci_layout,
    require_tools,
    squashfs,
)

REPO = Path(__file__).resolve().parents[3]
SLURM_CONF = REPO / "examples" / "slurm" / "slurm.conf"
CLUSTER = REPO / "examples" / "cluster"
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the container tests run as root")


@dataclass
class Live:
    env: dict[str, str]
    state: Path
    work: Path
    sqsh: Path
    """An enroot-style image file (busybox, ``/etc/environment`` with ``FROM_IMAGE``)."""


def phalanx(env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(BIN / "phalanx"), *args], env=env, cwd=cwd, capture_output=True, text=True
    )
    assert done.returncode == 0, f"phalanx {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    require_tools("umoci", "mksquashfs", "unsquashfs")
    work = tmp_path_factory.mktemp("containers")
    rootfs = busybox_rootfs(work / "rootfs")
    (rootfs / "etc").mkdir(exist_ok=True)
    (rootfs / "etc" / "os-release").write_text('NAME="phalanx busybox"\nID=phxbox\n')
    (rootfs / "app").mkdir()
    (rootfs / "app" / "marker").write_text("in the image\n")
    (rootfs / "etc" / "environment").write_text("PATH=/usr/sbin:/usr/bin:/sbin:/bin\nFROM_ETC=1\n")
    layout = oci_layout(
        work / "layout",
        rootfs,
        entrypoint=["/bin/echo", "entry"],
        cmd=["cmd-default"],
        env=["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "FROM_IMAGE=yes", "SHARED=image"],
        workdir="/app",
    )
    sqsh = squashfs(rootfs, work / "busybox.sqsh")
    state = work / "state"
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    # A variable of the server's own environment: no job may see it.
    env["PHALANX_TEST_SERVER_SECRET"] = "s3cret"
    try:
        server = spawn_server(state, ["--port", "0", "--config", str(CLUSTER)], env=env)
    except PhalanxError as exc:
        pytest.fail(exc.detail)
    del env["PHALANX_TEST_SERVER_SECRET"]
    env.update(PHALANX_URL=server.url, PHALANX_TOKEN=server.token, PHALANX_STATE_DIR=str(state))
    phalanx(env, "import", str(SLURM_CONF))
    phalanx(env, "image", "import", str(layout), "--name", "phx/busybox:1")
    phalanx(env, "image", "import", str(layout), "--name", "busybox")
    yield Live(env, state, work, sqsh)
    server.stop()


def job(live: Live, job_id: int, timeout: float = 60) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {live.env['PHALANX_TOKEN']}"}
    deadline = time.monotonic() + timeout
    while True:
        got = httpx.get(f"{live.env['PHALANX_URL']}/api/v1/jobs/{job_id}", headers=headers).json()
        if got["end_time"] or time.monotonic() > deadline:
            assert got["end_time"], f"job {job_id} did not end in {timeout} s: {got}"
            return dict(got)
        time.sleep(0.2)


def sbatch(live: Live, body: str, *options: str, shell: str = "/bin/bash") -> tuple[int, Path]:
    folder = Path(live.work / f"job-{time.monotonic_ns()}")
    folder.mkdir()
    script = folder / "job.sh"
    script.write_text(f"#!{shell}\n" + body)
    out = phalanx(live.env, "sbatch", *options, script.name, cwd=folder)
    match = re.search(r"Submitted batch job (\d+)", out)
    assert match, out
    return int(match.group(1)), folder


def run_script(live: Live, body: str, *options: str) -> tuple[dict[str, object], str]:
    job_id, folder = sbatch(live, body, *options)
    done = job(live, job_id)
    return done, (folder / f"slurm-{job_id}.out").read_text()


def mounts_of(path: Path) -> list[str]:
    with open("/proc/mounts", encoding="utf-8") as fh:
        return [line for line in fh if str(path) in line]


def loops_of(path: Path) -> list[str]:
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            if str(path) in backing.read_text():
                found.append(str(backing))
        except OSError:
            continue
    return found


# -- Slurm: srun --container-image -----------------------------------------------------


def test_a_step_sees_its_image_not_the_host(live: Live, tmp_path: Path) -> None:
    secret = tmp_path / "host-only"
    secret.write_text("host\n")
    done, out = run_script(
        live,
        f"srun --container-image={live.sqsh} sh -c '"
        "cat /etc/os-release; ls /app; "
        f"test -e {secret} && echo SEES-HOST || echo no-host-file; "
        "hostname; pwd'\necho rc=$?\n",
    )
    assert done["state"] == "COMPLETED", (done, out)
    assert 'NAME="phalanx busybox"' in out and "marker" in out, out
    assert "no-host-file" in out and "SEES-HOST" not in out, out
    assert "gpu1\n" in out, out  # the virtual node's name is the container's hostname
    assert "rc=0" in out


def test_an_imported_image_by_reference_with_its_env_and_workdir(live: Live) -> None:
    done, out = run_script(
        live,
        "export SHARED=host HOSTONLY=kept MYKEEP=host\n"
        "srun --container-image=docker://phx/busybox:1 --container-env=MYKEEP "
        "sh -c 'pwd; echo FROM_IMAGE=$FROM_IMAGE FROM_ETC=$FROM_ETC SHARED=$SHARED "
        "HOSTONLY=$HOSTONLY MYKEEP=$MYKEEP JOB=$SLURM_JOB_ID; "
        "echo SECRET=${PHALANX_TEST_SERVER_SECRET:-none}; echo PRELOAD=${LD_PRELOAD:-none}'\n",
    )
    assert done["state"] == "COMPLETED", (done, out)
    lines = out.splitlines()
    assert lines[0] == "/app", out  # the image's WorkingDir, not srun's
    assert f"FROM_IMAGE=yes FROM_ETC=1 SHARED=image HOSTONLY=kept MYKEEP=host JOB={done['id']}" in (
        out
    ), out
    assert "SECRET=none" in out and "PRELOAD=none" in out, out


def test_mounts_read_write_read_only_and_new_targets(live: Live, tmp_path: Path) -> None:
    rw, ro = tmp_path / "rw", tmp_path / "ro"
    rw.mkdir()
    ro.mkdir()
    (ro / "in").write_text("read me\n")
    done, out = run_script(
        live,
        f"srun --container-image={live.sqsh} --container-mounts={rw}:/data/out,{ro}:/data/in:ro "
        "--container-workdir=/data sh -c 'pwd; echo hi > /data/out/f && echo wrote; "
        "cat /data/in/in; echo x > /data/in/g || echo ro-refused; "
        "echo y > /etc/z || echo root-ro'\n",
    )
    assert done["state"] == "COMPLETED", (done, out)
    assert out.splitlines()[0] == "/data"
    assert "wrote" in out and (rw / "f").read_text() == "hi\n"
    assert "read me" in out and "ro-refused" in out and not (ro / "g").exists()
    assert "root-ro" in out  # pyxis' default: the root file system is read-only


def test_errors_as_pyxis_gives_them(live: Live) -> None:
    _, out = run_script(
        live,
        "srun --container-image=nothere/x:1 true; echo rc=$?\n"
        "srun --container-image=/no/such.sqsh true; echo rc=$?\n"
        f"srun --container-image={live.sqsh} --container-mounts=/no/such/dir:/x true; echo rc=$?\n"
        f"srun --container-image={live.sqsh} --container-workdir=/nowhere true; echo rc=$?\n"
        f"srun --container-image={live.sqsh} no-such-command; echo rc=$?\n",
    )
    assert "pyxis: failed to import docker image: docker://nothere/x:1" in out, out
    assert "phalanx never pulls" in out and "phalanx image import" in out
    assert "failed to create container filesystem for image: /no/such.sqsh" in out
    assert "--container-mounts: source path does not exist: /no/such/dir" in out
    assert "couldn't chdir to /nowhere" in out
    assert "no-such-command: no such file or directory in the container" in out
    assert re.findall(r"rc=(\d+)", out) == ["1", "1", "1", "125", "127"], out


def test_exit_status_and_a_writable_named_container_across_steps(live: Live) -> None:
    _, out = run_script(
        live,
        f"srun --container-image={live.sqsh} --container-name=keep --container-writable "
        "sh -c 'echo step0 > /kept'\n"
        "srun --container-name=keep cat /kept\n"
        f"srun --container-image={live.sqsh} sh -c 'test -e /kept && echo LEAK || echo fresh'\n"
        f"srun --container-image={live.sqsh} sh -c 'exit 7'; echo rc=$?\n",
    )
    assert "step0" in out and "fresh" in out and "LEAK" not in out, out
    assert "rc=7" in out and "Exited with exit code 7" in out, out


def test_two_nodes_one_task_each(live: Live) -> None:
    done, out = run_script(
        live,
        f"srun -l --container-image={live.sqsh} sh -c 'echo $(hostname) $SLURM_PROCID'\n",
        "-N2",
        "--ntasks-per-node=1",
    )
    assert done["state"] == "COMPLETED", (done, out)
    assert sorted(out.split("\n")[:2]) == ["0: gpu1 0", "1: gpu2 1"], out


def test_sbatch_container_image_runs_the_batch_script_in_the_image(live: Live) -> None:
    job_id, folder = sbatch(
        live,
        f"#SBATCH --container-image={live.sqsh}\n#SBATCH --container-workdir=/app\n"
        "cat /etc/os-release; pwd; echo JOB=$SLURM_JOB_ID; hostname\n",
        shell="/bin/sh",  # the image's: busybox has no bash
    )
    done = job(live, job_id)
    out = (folder / f"slurm-{job_id}.out").read_text()
    assert done["state"] == "COMPLETED", (done, out)
    assert 'NAME="phalanx busybox"' in out and "\n/app\n" in out, out
    assert f"JOB={job_id}" in out and "gpu1" in out, out
    # The command line's option wins over the script's, one option at a time.
    job_id, folder = sbatch(
        live,
        f"#SBATCH --container-image={live.sqsh}\ntrue\n",
        "--container-image=/no/such.sqsh",
    )
    done = job(live, job_id)
    out = (folder / f"slurm-{job_id}.out").read_text()
    assert done["state"] == "FAILED", (done, out)
    assert "pyxis: failed to create container filesystem for image: /no/such.sqsh" in out


@pytest.fixture
def fake_gpus() -> Iterator[list[str]]:
    """Character devices standing in for GPUs 0 and 1 (made where there are none)."""
    made: list[str] = []
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        path = f"/dev/{name}"
        if not os.path.exists(path):
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            made.append(path)
    try:
        yield made
    finally:
        for path in made:
            os.unlink(path)


def test_a_task_sees_its_gpus_device_nodes(live: Live, fake_gpus: list[str]) -> None:
    done, out = run_script(
        live,
        f"srun --container-image={live.sqsh} sh -c 'echo CVD=$CUDA_VISIBLE_DEVICES; "
        "ls /dev | grep nvidia; test -c /dev/nvidia0 && echo char-device'\n",
        "--gpus-per-node=1",
    )
    assert done["state"] == "COMPLETED", (done, out)
    assert "CVD=0" in out and "nvidia0\n" in out and "nvidiactl" in out, out
    assert "nvidia1" not in out and "char-device" in out, out


def test_sigterm_reaches_the_command_and_cancel_ends_it(live: Live) -> None:
    job_id, folder = sbatch(
        live,
        f"srun --container-image={live.sqsh} sh -c "
        "'trap \"echo got-term; exit 0\" TERM; echo started; while :; do sleep 0.1; done'\n",
    )
    out = folder / f"slurm-{job_id}.out"
    deadline = time.monotonic() + 30
    while not (out.exists() and "started" in out.read_text()):
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.1)
    phalanx(live.env, "scancel", str(job_id))
    done = job(live, job_id)
    assert done["state"] == "CANCELLED"
    assert "got-term" in out.read_text()
    assert not mounts_of(live.state) and not loops_of(live.sqsh)


def test_kill_9_of_the_supervisor_leaves_no_mount(live: Live) -> None:
    job_id, folder = sbatch(
        live, f"srun --container-image={live.sqsh} sh -c 'echo started; sleep 300'\n"
    )
    out = folder / f"slurm-{job_id}.out"
    deadline = time.monotonic() + 30
    while not (out.exists() and "started" in out.read_text()):
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.1)
    assert loops_of(live.sqsh), "the image is mounted while the step runs"
    jobdir = live.state / "runtime" / "jobs" / str(job_id) / "1"
    supervisor = int((jobdir / "supervisor.pid").read_text().split()[0])
    os.kill(supervisor, signal.SIGKILL)
    done = job(live, job_id, timeout=90)
    assert done["state"] in ("FAILED", "NODE_FAIL", "CANCELLED", "REQUEUED", "PENDING"), done
    deadline = time.monotonic() + 30
    while loops_of(live.sqsh) or mounts_of(live.state):
        assert time.monotonic() < deadline, (loops_of(live.sqsh), mounts_of(live.state))
        time.sleep(0.2)


# -- Kubernetes: a Job's pods in their image ----------------------------------------------


def apply_job(
    live: Live,
    name: str,
    container: dict[str, object],
    *,
    deadline_s: int | None = None,
    **pod: object,
) -> dict[str, object]:
    doc = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "default"},
        },
        "spec": {
            "backoffLimit": 0,
            **({"activeDeadlineSeconds": deadline_s} if deadline_s else {}),
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "1"}}, **container}
                    ],
                    **pod,
                }
            },
        },
    }
    path = live.work / f"{name}.json"
    path.write_text(json.dumps(doc))
    phalanx(live.env, "apply", "-f", str(path))
    headers = {"Authorization": f"Bearer {live.env['PHALANX_TOKEN']}"}
    deadline = time.monotonic() + 60
    while True:
        jobs = httpx.get(
            f"{live.env['PHALANX_URL']}/api/v1/jobs", headers=headers, params={"name": name}
        ).json()
        items = jobs["items"] if isinstance(jobs, dict) else jobs
        mine = [j for j in items if j["name"] == name]
        if mine and mine[0]["end_time"]:
            return dict(mine[0])
        assert time.monotonic() < deadline, mine
        time.sleep(0.2)


def pod_log(live: Live, found: dict[str, object]) -> str:
    logs = live.state / "runtime" / "jobs" / str(found["id"]) / "1" / "kube" / "logs"
    return "".join(p.read_text() for p in sorted(logs.glob("*/c.log")))


@pytest.mark.parametrize(
    ("name", "fields", "expected"),
    [
        ("neither", {}, "entry cmd-default"),
        ("args-only", {"args": ["a1", "a2"]}, "entry a1 a2"),
        ("command-only", {"command": ["/bin/echo", "c1"]}, "c1"),
        ("both", {"command": ["/bin/echo"], "args": ["b1"]}, "b1"),
    ],
)
def test_entrypoint_and_cmd_by_kubernetes_rules(
    live: Live, name: str, fields: dict[str, object], expected: str
) -> None:
    found = apply_job(live, f"ep-{name}", {"image": "phx/busybox:1", **fields})
    assert found["state"] == "COMPLETED", found
    assert pod_log(live, found).strip() == expected


def test_a_pod_gets_image_env_volumes_user_and_workdir(live: Live, tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "x").write_text("from-host\n")
    found = apply_job(
        live,
        "pod-env",
        {
            "image": "phx/busybox:1",
            "command": ["sh", "-c"],
            "args": [
                "pwd; echo FROM_IMAGE=$FROM_IMAGE SHARED=$SHARED HOST=${HOSTONLY:-none} "
                "SECRET=${PHALANX_TEST_SERVER_SECRET:-none}; cat /h/x; "
                "echo w > /h/y || echo h-ro; echo s > /scratch/s && echo scratch-ok; id -u; "
                "hostname"
            ],
            "env": [{"name": "SHARED", "value": "container"}],
            "workingDir": "/work/dir",
            "securityContext": {"runAsUser": 65534},
            "volumeMounts": [
                {"name": "h", "mountPath": "/h", "readOnly": True},
                {"name": "scratch", "mountPath": "/scratch"},
            ],
        },
        volumes=[
            {"name": "h", "hostPath": {"path": str(host)}},
            {"name": "scratch", "emptyDir": {}},
        ],
    )
    log = pod_log(live, found)
    assert found["state"] == "COMPLETED", (found, log)
    lines = log.splitlines()
    assert lines[0] == "/work/dir", log
    assert "FROM_IMAGE=yes SHARED=container HOST=none SECRET=none" in log, log
    assert "from-host" in log and "h-ro" in log and not (host / "y").exists()
    assert "scratch-ok" in log and "65534" in log and "pod-env-" in log, log


@pytest.mark.parametrize(
    ("policy", "reason"), [("Never", "ErrImageNeverPull"), ("IfNotPresent", "ErrImagePull")]
)
def test_a_missing_image_fails_the_pod_with_its_reason(
    live: Live, policy: str, reason: str
) -> None:
    found = apply_job(
        live,
        f"missing-{policy.lower()}",
        {"image": "example.com/not/imported:1", "imagePullPolicy": policy, "command": ["true"]},
    )
    assert found["state"] == "FAILED", found
    assert reason in str(found.get("message") or found.get("reason")), found


def test_a_deadline_ends_a_pod_in_its_image(live: Live) -> None:
    found = apply_job(
        live,
        "deadline",
        {"image": "phx/busybox:1", "command": ["sleep", "300"]},
        deadline_s=3,
    )
    assert found["state"] in ("TIMEOUT", "FAILED"), found
    assert not mounts_of(live.state) and not loops_of(live.sqsh)


def test_image_ls_and_rm(live: Live) -> None:
    listed = phalanx(live.env, "image", "ls")
    assert "docker.io/phx/busybox:1" in listed and "docker.io/library/busybox:latest" in listed
    assert shutil.which("umoci")
