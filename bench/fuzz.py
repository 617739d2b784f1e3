"""Coverage-guided fuzzing of every parser of user input, with atheris (libFuzzer).

Each target of ``tests/reliability/parsers.py`` (sbatch scripts, command lines
and ``SBATCH_*`` variables, option values, time strings, arrays, dependencies,
hostlists, output patterns, slurm.conf, topology.conf, quantities, YAML and
JSON manifests) is fuzzed in its own process for SECONDS, starting from the
valid inputs in ``examples/`` and a few of each grammar, with phalanx, PyYAML
and python-hostlist instrumented for coverage. The property is the tests': the
parser returns normally, or raises ``phalanx.errors.Invalid`` whose message
says where. A breach is recorded (the input is kept) and fuzzing goes on; a
hang (one input over ``--input-timeout``) or an out-of-memory ends that
target's run and is recorded too.

Prints one JSON object: per target the executions, the seconds, and what was
found. Needs ``pip install 'phalanx[fuzz]'`` (atheris)::

    .venv/bin/python bench/fuzz.py 60                    # every target, 60 s each
    .venv/bin/python bench/fuzz.py 10 --target array     # one target
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

INSTRUMENTED = ["phalanx", "yaml", "hostlist"]

GRAMMAR_SEEDS: dict[str, list[str]] = {
    "time": ["10", "1:30", "1-2", "1-02:03:04", "unlimited", "30:15"],
    "array": ["0-15", "0,6,16-32", "0-15:4%2", "1-3,8,10-20:5%2", "0-1000"],
    "dependency": ["afterok:12_3:13,singleton", "after:5+10?afternotok:6", "afterok:7_[1-3]"],
    "memory": ["512", "1000G", "1T", "1500K", "4gb"],
    "begin": ["now+1hour", "16:00", "2026-12-05T10:00:00", "tomorrow", "teatime", "120526"],
    "signal": ["B:USR1@90", "SIGTERM", "10@60"],
    "nodes": ["2", "1-4", "2k"],
    "gres": ["gpu:8", "gpu:h100:8,mps:100", "gres/gpu:2"],
    "gpus": ["h100:8", "8"],
    "hostlist": ["tux[1-3],gpu07", "a[01-16]b[1-2]", "n[1-4,7] m1"],
    "pattern": ["logs/%x-%j.out", "job%4j-%2t.out", "slurm-%A_%a.out", "%%\\%j"],
    "sbatch-args": ["-N2\n-n\n16\n--job-name=x\n--part\ngpu\n-Hv", "--array=0-7%2\n--gpus=8"],
    "sbatch-env": ["zgpu\n\x01100", "\x0710"],
    "quantity": ["500m", "1.5Ti", "2e3", "64Gi", "0.25"],
    "topology-conf": [
        "SwitchName=s0 Nodes=tux[0-3]\nSwitchName=s1 Nodes=tux[4-7]\n"
        "SwitchName=s2 Switches=s[0-1]\n",
        "BlockName=b1 Nodes=tux[0-3]\nBlockName=b2 Nodes=tux[4-7]\nBlockSizes=4,8\n",
    ],
}


def seed_corpus(target: str) -> list[bytes]:
    """Valid inputs to start ``target`` from."""
    from tests.reliability.parsers import seeds

    found = seeds()
    texts = list(GRAMMAR_SEEDS.get(target, []))
    if target.startswith("manifest"):
        texts += found["yaml"]
    elif target == "sbatch-script":
        texts += found["sbatch"] + ["#!/bin/sh\n#SBATCH -N 2 --time=10\nsrun true\n"]
    elif target == "slurm-conf":
        texts += found["slurm.conf"]
    return [t.encode("utf-8", "surrogateescape") for t in texts or [""]]


# ------------------------------------------------------------------ one target (child)


def _worker(args: argparse.Namespace) -> int:
    import atheris

    with atheris.instrument_imports(include=INSTRUMENTED):
        import hostlist  # noqa: F401
        import yaml  # noqa: F401

        import phalanx.control.slurmjobs
        import phalanx.dialects.kueue.manifests
        import phalanx.dialects.slurm.hostlists
        import phalanx.dialects.slurm.options
        import phalanx.dialects.slurm.sbatch
        import phalanx.dialects.slurm.scheduling
        import phalanx.dialects.slurm.slurmconf
        import phalanx.dialects.slurm.topologyconf
        import phalanx.model.quantity
        import phalanx.timefmt  # noqa: F401

    from tests.reliability.parsers import NotClear, check

    findings = Path(args.findings)
    seen: set[str] = set()

    def test_one(data: bytes) -> None:
        # Every byte is kept: what is not UTF-8 becomes a surrogate, as sbatch reads files.
        text = data.decode("utf-8", "surrogateescape")
        try:
            check(args.worker, text)
        except NotClear as exc:
            first = str(exc).splitlines()[0][:300]
            key = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", first)
            if key in seen:
                return
            seen.add(key)
            with findings.open("a") as out:
                out.write(json.dumps({"kind": "breach", "error": first, "input": text[:2000]}))
                out.write("\n")

    sys.setrecursionlimit(3000)
    atheris.Setup(
        [
            sys.argv[0],
            f"-max_total_time={args.seconds}",
            f"-timeout={args.input_timeout}",
            f"-rss_limit_mb={args.rss_limit_mb}",
            f"-max_len={args.max_len}",
            f"-artifact_prefix={args.artifacts}/",
            "-print_final_stats=1",
            args.corpus,
        ],
        test_one,
    )
    atheris.Fuzz()
    return 0


# ------------------------------------------------------------------ every target (parent)

_RUNS = re.compile(r"stat::number_of_executed_units:\s*(\d+)")
_DONE = re.compile(r"Done (\d+) runs in (\d+) second")


def _fuzz_one(target: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    corpus = work / target / "corpus"
    artifacts = work / target / "artifacts"
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    for data in seed_corpus(target):
        (corpus / hashlib.sha1(data).hexdigest()).write_bytes(data)
    findings = work / target / "findings.jsonl"
    findings.unlink(missing_ok=True)
    biggest = max(len(d) for d in seed_corpus(target))
    max_len = max(args.max_len, 2 * biggest)
    command = [
        sys.executable, __file__, str(args.seconds), "--worker", target,
        "--corpus", str(corpus), "--artifacts", str(artifacts), "--findings", str(findings),
        "--max-len", str(max_len), "--input-timeout", str(args.input_timeout),
        "--rss-limit-mb", str(args.rss_limit_mb),
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(
        command, capture_output=True, text=True, errors="replace",
        timeout=args.seconds + 3 * args.input_timeout + 120,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    log = proc.stderr
    runs = _RUNS.findall(log) or [m[0] for m in _DONE.findall(log)]
    found: list[dict[str, Any]] = []
    if findings.exists():
        found = [json.loads(line) for line in findings.read_text().splitlines() if line]
    for artifact in sorted(artifacts.iterdir()):
        kind = artifact.name.split("-", 1)[0]  # crash-, timeout-, oom-, slow-unit-
        data = artifact.read_bytes()
        found.append(
            {"kind": kind, "input": data.decode("utf-8", "replace")[:2000], "file": str(artifact)}
        )
    result: dict[str, Any] = {
        "executions": int(runs[-1]) if runs else None,
        "seconds": round(elapsed, 1),
        "exit_code": proc.returncode,
        "corpus_files": sum(1 for _ in corpus.iterdir()),
        "max_len": max_len,
        "findings": found,
    }
    if proc.returncode != 0 and not found:
        result["log_tail"] = log[-2000:]
    return result


def main(argv: list[str] | None = None) -> int:
    from tests.reliability.parsers import TARGETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seconds", nargs="?", type=int, default=60, help="per target")
    parser.add_argument("--target", action="append", choices=sorted(TARGETS), help="repeatable")
    parser.add_argument("--jobs", type=int, default=1, help="targets fuzzed at once")
    parser.add_argument("--work", help="corpora and findings (default: a temporary folder)")
    parser.add_argument("--max-len", type=int, default=4096, help="longest input, bytes")
    parser.add_argument("--input-timeout", type=int, default=20, help="seconds: a hang")
    parser.add_argument("--rss-limit-mb", type=int, default=3072)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--artifacts", help=argparse.SUPPRESS)
    parser.add_argument("--findings", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)

    targets = args.target or sorted(TARGETS)
    with tempfile.TemporaryDirectory(prefix="phalanx-fuzz-") as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = dict(
                zip(targets, pool.map(lambda t: _fuzz_one(t, args, work), targets), strict=True)
            )
    executions = sum(r["executions"] or 0 for r in results.values())
    report = {
        "benchmark": "fuzz",
        "seconds_per_target": args.seconds,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "targets": results,
        "total_executions": executions,
        "total_findings": sum(len(r["findings"]) for r in results.values()),
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 1 if report["total_findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
