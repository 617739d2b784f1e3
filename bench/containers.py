"""Container start overhead against a plain exec, in one run (prints JSON).

Two measures, each alternating its two sides so that the machine's noise falls
on both:

- ``exec``: the container helper entering a busybox squashfs image and running
  ``true`` (``python -I -m phalanx.runtime.containers.exec SPEC -- true``)
  against the same ``true`` run on the host;
- ``srun``: inside one batch job of a real ``phalanx up``, ``srun
  --container-image=IMG true`` steps against ``srun true`` steps, timed by the
  script itself.

The goal is under 100 ms of overhead per step. Needs root, busybox-static and
squashfs-tools (it says what is missing on stderr and exits 0 without a result).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _busybox_image(work: Path) -> Path:
    rootfs = work / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    busybox = shutil.which("busybox") or "/bin/busybox"
    shutil.copy(busybox, rootfs / "bin" / "busybox")
    for applet in ("sh", "true", "cat"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc").mkdir()
    (rootfs / "etc" / "environment").write_text("PATH=/bin\n")
    image = work / "busybox.sqsh"
    subprocess.run(
        ["mksquashfs", str(rootfs), str(image), "-noappend", "-quiet"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return image


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 2),
        "p90_ms": round(ordered[int(len(ordered) * 0.9) - 1] * 1000, 2),
    }


def bench_exec(image: Path, work: Path, rounds: int) -> dict[str, object]:
    scratch = work / "scratch"
    scratch.mkdir()
    spec = json.dumps({"image": str(image), "scratch": str(scratch), "writable": True})
    helper = [sys.executable, "-I", "-m", "phalanx.runtime.containers.exec", spec, "--", "true"]
    host, inside = [], []
    env = {"PATH": "/usr/bin:/bin"}
    for _ in range(rounds):
        began = time.perf_counter()
        subprocess.run(["true"], check=True, env=env)
        host.append(time.perf_counter() - began)
        began = time.perf_counter()
        subprocess.run(helper, check=True, env=env)
        inside.append(time.perf_counter() - began)
    plain, contained = _ms(host), _ms(inside)
    overhead = round(contained["median_ms"] - plain["median_ms"], 2)
    return {"host": plain, "container": contained, "overhead_ms": overhead}


def bench_srun(image: Path, work: Path, steps: int) -> dict[str, object] | str:
    from phalanx.control.spawn import spawn_server

    state = work / "state"
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    server = spawn_server(state, ["--port", "0", "--no-kube-api"], env=env)
    try:
        env.update(PHALANX_URL=server.url, PHALANX_TOKEN=server.token)
        subprocess.run(
            [str(BIN / "phalanx"), "import", str(REPO / "examples" / "slurm" / "slurm.conf")],
            env=env,
            check=True,
            capture_output=True,
        )
        job = work / "job"
        job.mkdir()
        stamp = 'date +%s.%N >> "$1"'
        lines = ["#!/bin/bash", f"t() {{ {stamp.replace('$1', '$T')}; }}"]
        for i in range(steps):
            lines += [f"T=host.{i}; t; srun true; t"]
            lines += [f"T=ctr.{i}; t; srun --container-image={image} true; t"]
        (job / "steps.sh").write_text("\n".join(lines) + "\n")
        done = subprocess.run(
            [str(BIN / "phalanx"), "sbatch", "--wait", "steps.sh"],
            cwd=job,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            return f"sbatch failed: {done.stdout}{done.stderr}"

        def spans(prefix: str) -> list[float]:
            out = []
            for i in range(steps):
                start, end = (float(x) for x in (job / f"{prefix}.{i}").read_text().split())
                out.append(end - start)
            return out

        plain, contained = _ms(spans("host")), _ms(spans("ctr"))
        overhead = round(contained["median_ms"] - plain["median_ms"], 2)
        return {"host_step": plain, "container_step": contained, "overhead_ms": overhead}
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="exec pairs")
    parser.add_argument("--steps", type=int, default=20, help="srun step pairs")
    args = parser.parse_args()
    missing = [t for t in ("mksquashfs", "busybox") if shutil.which(t) is None]
    if os.geteuid() != 0 or missing:
        why = "root" if os.geteuid() != 0 else f"Debian's {', '.join(missing)}"
        print(f"bench/containers.py: needs {why}; skipped", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="phx-bench-ctr-") as tmp:
        work = Path(tmp)
        image = _busybox_image(work)
        result = {
            "benchmark": "containers",
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()} {os.cpu_count()} cores",
            "exec": bench_exec(image, work, args.rounds),
            "srun": bench_srun(image, work, args.steps),
            "goal_overhead_ms": 100,
        }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
