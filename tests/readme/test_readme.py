"""The README's walkthroughs, run as written, in order, as root and as an ordinary user.

Every ``sh`` block of README.md that starts a server (``.venv/bin/phalanx up -d``)
is a walkthrough: it starts ``phalanx up`` with its defaults (no
``--single-user``, no ``--state-dir``, port 6900), uses it through the CLI, the
Slurm commands and their shims and the Kueue manifests, cleans up and stops it.
Each runs with ``bash -e`` in a fresh copy of this working tree, in a private
network and mount namespace (so that port 6900 and ``/var/lib`` are its own and
nothing of this machine is touched), once as root and once as a throwaway Unix
account made with ``useradd``. Needs root, ``unshare``, ``ip`` and ``useradd``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from phalanx.runtime.accounts import reachable

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
VENV = REPO / ".venv"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and a throwaway account"),
    pytest.mark.skipif(
        not all(shutil.which(tool) for tool in ("unshare", "ip", "useradd", "userdel", "git")),
        reason="needs unshare, ip (iproute2), useradd/userdel and git",
    ),
    pytest.mark.skipif(not (VENV / "bin" / "phalanx").exists(), reason="needs .venv (make venv)"),
]


_BEFORE_UP = (".venv/bin/phalanx image ", "examples/containers/build-images.sh", "test -e ")
"""What a walkthrough may do before its ``phalanx up -d``: make and import images."""


def walkthroughs() -> list[str]:
    """The README's ``sh`` blocks that start a server (after making and importing images)."""
    blocks = re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.S | re.M)
    out = []
    for block in blocks:
        lines = block.splitlines()
        ups = [i for i, line in enumerate(lines) if line.startswith(".venv/bin/phalanx up -d")]
        if ups and all(line.startswith(_BEFORE_UP) for line in lines[: ups[0]]):
            out.append(block)
    return out


def python_blocks() -> list[str]:
    """The README's ``python`` blocks: the client's (needs a server), the engine's."""
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)


def script() -> str:
    """Every walkthrough in order, and the Python blocks run as written while the first
    walkthrough's server is up (before its ``phalanx down``)."""
    blocks = walkthroughs()
    first = blocks[0].rstrip().splitlines()
    for i, code in enumerate(python_blocks()):
        first.insert(-1, f".venv/bin/python - <<'PHALANX_README_{i}'\n{code}PHALANX_README_{i}")
    return "\n".join(["\n".join(first) + "\n", *blocks[1:]])


def test_the_walkthroughs_cover_what_users_do_first() -> None:
    text = "\n".join(walkthroughs())
    for command in (
        "phalanx up -d",
        "phalanx submit",
        "phalanx get jobs",
        "phalanx describe job",
        "phalanx explain",
        "phalanx logs",
        "phalanx cancel --all",
        "phalanx down",
        "phalanx shims",
        "sbatch ",
        "squeue",
        "sacct",
        "scancel",
        "phalanx apply -f",
        "phalanx get workloads",
    ):
        assert command in text, f"no README walkthrough runs {command!r}"
    for block in walkthroughs():
        last = block.rstrip().splitlines()[-1].split("#", 1)[0].rstrip()
        assert last.endswith("phalanx down"), f"a walkthrough does not stop its server: {last}"


def test_every_up_option_the_readme_names_exists() -> None:
    text = README.read_text()
    table = text[text.index("| `phalanx up ...` |") :]
    table = table[: table.index("\n\n")]
    options = sorted(set(re.findall(r"`(--[a-z-]+)", table)))
    assert len(options) >= 6, options
    done = subprocess.run(
        [str(VENV / "bin" / "phalanx"), "up", "--help"], capture_output=True, text=True, check=True
    )
    missing = [o for o in options if o not in done.stdout]
    assert not missing, f"README names phalanx up options that do not exist: {missing}"


@dataclass
class Run:
    """A walkthrough's combined output and exit status."""

    output: str
    returncode: int


def _copy_tree(dest: Path) -> None:
    """This working tree's files (tracked and untracked, not ignored): a fresh checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = REPO / name
        if not source.is_file():
            continue  # deleted in the working tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


_ISOLATE = (
    "set -e; ip link set lo up; mount -t tmpfs -o mode=0755 tmpfs /var/lib; "
    'cd "$1"; shift; exec "$@"'
)
"""Inside the namespaces: loopback up, an empty /var/lib, then the command in the copy."""


def _run(copy: Path, script: str, env: dict[str, str], user: str | None = None) -> Run:
    (copy / "walkthrough.sh").write_text(script)
    command = ["bash", "-e", "-x", "walkthrough.sh"]
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    done = subprocess.run(
        ["unshare", "--mount", "--net", "--propagation", "private"]
        + ["sh", "-c", _ISOLATE, "isolate", str(copy), "env", "-i"]
        + [f"{k}={v}" for k, v in env.items()]
        + command,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return Run(done.stdout + done.stderr, done.returncode)


def _env(home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
    }


def _check(run: Run, state_dir: str) -> None:
    """What each walkthrough's commands must have said."""
    out = run.output
    assert run.returncode == 0, out[-6000:]
    assert out.count("phalanx is up at http://127.0.0.1:6900") == 4, out[-6000:]
    assert out.count(f"state dir: {state_dir}") == 4, out[-6000:]
    assert out.count("phalanx stopped (pid ") == 4, out[-6000:]
    # The first walkthrough: the 2-node gang ran, its two ranks said so.
    assert "rank 0/2 on gpu-h100-" in out and "rank 1/2 on gpu-h100-" in out, out[-6000:]
    assert "rank 1 step 3" in out, out[-6000:]
    # The Python client's job streamed its output too; the engine's block printed Admit.
    assert out.count("rank 1/2 on gpu-h100-") == 2, out[-6000:]
    assert "{'type': 'Admit', 'job_id': 1, 'cluster_queue': 'research'" in out, out[-6000:]
    assert "Events:" in out or "EVENTS" in out.upper(), out[-6000:]
    # Slurm: the batch script went in and the tools answered.
    assert re.search(r"Submitted batch job \d+", out), out[-6000:]
    assert "JOBID PARTITION" in out and "PARTITION" in out and "JobID" in out, out[-6000:]
    # Kueue: the PyTorchJob and the applied Job.
    assert "ddp-hello" in out and "job/default/shards created" in out, out[-6000:]
    # kubectl, on the Kubernetes API at its default port, with the printed kubeconfig.
    assert "kubernetes API: https://127.0.0.1:6443" in out, out[-6000:]
    assert "job.batch/shards condition met" in out, out[-6000:]
    assert "processing shard" in out and "QUEUE" in out, out[-6000:]
    assert re.search(r"Username\s+alice", out), out[-6000:]
    assert "Traceback" not in out, out[-6000:]


def _no_server_left(state: Path) -> None:
    assert not (state / "phalanx.lock").exists() or _lock_free(state / "phalanx.lock")


def _lock_free(path: Path) -> bool:
    import fcntl

    with open(path) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def _images(tree: Path) -> None:
    """The walkthroughs run without a network, where ``build-images.sh --python`` cannot
    reach Debian's archive: its images are made before (as a user would have, once) and
    put where the script writes them."""
    from tests.images import pytorch_image

    built = pytorch_image().parent
    out = tree / "examples" / "containers" / "out"
    out.mkdir(parents=True)
    for item in built.iterdir():
        if item.name.startswith("."):
            continue
        if item.is_dir():
            shutil.copytree(item, out / item.name, symlinks=True)
        else:
            (out / item.name).symlink_to(item)


@pytest.fixture
def copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = Path(tmp_path_factory.mktemp("readme"))
    base.chmod(0o755)
    tree = base / "phalanx"
    _copy_tree(tree)
    _images(tree)
    yield tree


def test_the_readme_runs_as_root(copy: Path, tmp_path: Path) -> None:
    (copy / ".venv").symlink_to(VENV)
    home = tmp_path / "home"
    home.mkdir()
    run = _run(copy, script(), _env(home))
    _check(run, "/var/lib/phalanx")
    assert "user 'root'" not in run.output


def _python_for_others() -> str | None:
    """An interpreter of this one's version that every account may run (the venv's own
    may be in a folder others cannot enter, such as /root/.pyenv)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (os.path.realpath(sys.executable), f"/usr/bin/{version}"):
        if os.access(candidate, os.X_OK) and reachable(candidate) is None:
            return candidate
    return None


def _venv_for(account: str, copy: Path) -> None:
    """The account's own ``.venv`` in its copy: an interpreter it may run, with this
    checkout's installed packages (the same code) on its path, and the console scripts."""
    python = _python_for_others()
    assert python is not None
    subprocess.run([python, "-m", "venv", "--without-pip", str(copy / ".venv")], check=True)
    site = Path(
        subprocess.run(
            [
                str(copy / ".venv" / "bin" / "python"),
                "-c",
                "import sysconfig;print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    ours = sysconfig.get_paths()["purelib"]
    (site / "phalanx-checkout.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    for script in (VENV / "bin").iterdir():
        if script.name.startswith("python") or not script.is_file():
            continue
        head = script.read_bytes()[:200]
        if not head.startswith(b"#!") or b"python" not in head.split(b"\n", 1)[0]:
            continue
        body = script.read_text().split("\n", 1)[1]
        target = copy / ".venv" / "bin" / script.name
        target.write_text(f"#!{copy / '.venv' / 'bin' / 'python'}\n{body}")
        target.chmod(0o755)


@pytest.fixture
def account() -> Iterator[str]:
    name = f"phx-{secrets.token_hex(3)}"
    subprocess.run(["useradd", "-m", "-U", "-s", "/bin/bash", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True, check=False)
        subprocess.run(["userdel", "-r", name], capture_output=True, check=False)


def test_the_readme_runs_as_an_ordinary_user(copy: Path, account: str) -> None:
    closed = reachable(str(VENV.resolve())) or reachable(sysconfig.get_paths()["purelib"])
    if closed is not None:
        pytest.skip(f"other accounts cannot enter {closed}, where this checkout's packages are")
    if _python_for_others() is None:
        pytest.skip("no Python interpreter of this version that other accounts may run")
    import pwd

    entry = pwd.getpwnam(account)
    home = Path(entry.pw_dir)
    mine = home / "phalanx"
    shutil.move(str(copy), str(mine))
    _venv_for(account, mine)
    subprocess.run(["chown", "-R", f"{account}:{account}", str(mine)], check=True)
    env = _env(home) | {"USER": account, "LOGNAME": account}
    run = _run(mine, script(), env, user=account)
    _check(run, f"{home}/.local/state/phalanx")
    assert f"{account} (uid {entry.pw_uid}), the server's own user" in run.output
    _no_server_left(home / ".local" / "state" / "phalanx")
