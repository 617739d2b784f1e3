"""Golden decision streams: record what the engine decides, check it is unchanged.

A change that moves code without meaning to change behaviour must leave every
decision the same. This records, per workload, a SHA-256 over every cycle's
``(now, decisions)`` as the engine returns them (``repr`` of the frozen decision
records), and the number of decisions:

``conformance``
    the Kueue conformance scenarios of ``tests/conformance`` (run with pytest, in
    this process), in file order.
``engine/<preset>`` and ``engine/<preset>+backfill+fair-share``
    ``bench/engine.py``'s workload, scaled down (300 nodes, 3,000 pending jobs, 20
    ClusterQueues in 4 Cohorts, 100 steady cycles), under each preset.
``sim/<policy>`` (``--sim``)
    the simulator's Philly replay on 80 shared nodes (74 % load) under every
    policy, as ``bench/sim_sweep.py`` runs it (about ten minutes; needs the traces).

``python bench/goldens.py record FILE [--sim]`` writes them; ``python
bench/goldens.py check FILE [--sim]`` runs them again and prints, as JSON, each
workload's digest and whether it matches (exit status 1 if any does not).
``bench/goldens.json`` holds the current ones (``tests/bench/test_goldens.py``
checks them in ``make test``); a change meant to alter decisions records them
again, and says so.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ("phalanx", "kueue", "slurm")
ENGINE_ARGS = [
    "--nodes=300",
    "--pending=3000",
    "--cluster-queues=20",
    "--cohorts=4",
    "--steady-cycles=100",
    "--json",
]


class Digest:
    """A running SHA-256 over cycles' decisions."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.decisions = 0

    def add(self, now: float, decisions: Sequence[Any]) -> None:
        self.sha.update(repr((now, list(decisions))).encode())
        self.decisions += len(decisions)

    def result(self) -> dict[str, Any]:
        return {"sha256": self.sha.hexdigest(), "decisions": self.decisions}


@contextmanager
def recording() -> Iterator[Digest]:
    """Every ``Engine.cycle`` in this process feeds the digest while it is open."""
    from phalanx.engine.engine import Engine

    digest = Digest()
    original = Engine.cycle

    def cycle(self: Engine, now: float, *args: Any, **kwargs: Any) -> Any:
        decisions = original(self, now, *args, **kwargs)
        digest.add(now, decisions)
        return decisions

    Engine.cycle = cycle  # type: ignore[method-assign]
    try:
        yield digest
    finally:
        Engine.cycle = original  # type: ignore[method-assign]


def conformance() -> dict[str, Any]:
    import pytest

    with recording() as digest, redirect_stdout(sys.stderr):
        code = pytest.main(["-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "conformance")])
    if code != 0:
        raise SystemExit(f"goldens: the conformance scenarios failed (pytest exit {code})")
    return digest.result()


def _engine_bench() -> Any:
    spec = importlib.util.spec_from_file_location("phalanx_bench_engine", ROOT / "bench/engine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def engine(preset: str, backfill: bool) -> dict[str, Any]:
    bench = _engine_bench()
    argv = [*ENGINE_ARGS, f"--preset={preset}"]
    if backfill:
        argv += ["--backfill", "--fair-share"]
    args = bench.parse_args(argv)
    with recording() as digest:
        bench.run(args)
    return digest.result()


def sim(policy: str) -> dict[str, Any]:
    from phalanx.sim.run import simulate

    with tempfile.TemporaryDirectory() as out, recording() as digest:
        simulate("philly", "philly-shared:80", [policy], Path(out))
    return digest.result()


def workloads(with_sim: bool) -> dict[str, Callable[[], dict[str, Any]]]:
    runs: dict[str, Callable[[], dict[str, Any]]] = {"conformance": conformance}
    for preset in PRESETS:
        runs[f"engine/{preset}"] = lambda p=preset: engine(p, False)  # type: ignore[misc]
        runs[f"engine/{preset}+backfill+fair-share"] = lambda p=preset: engine(p, True)  # type: ignore[misc]
    if with_sim:
        from phalanx.sim.setup import POLICIES

        for policy in POLICIES:
            runs[f"sim/{policy}"] = lambda p=policy: sim(p)  # type: ignore[misc]
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("record", "check"))
    parser.add_argument("file", type=Path, help="the goldens (JSON)")
    parser.add_argument("--sim", action="store_true", help="the Philly replays too")
    args = parser.parse_args(argv)
    results = {name: run() for name, run in workloads(args.sim).items()}
    if args.action == "record":
        args.file.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        print(json.dumps({"recorded": str(args.file), "workloads": results}))
        return 0
    try:
        golden = json.loads(args.file.read_text())
    except (OSError, ValueError) as exc:
        print(f"goldens: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    report = {
        name: {**result, "same": golden.get(name) == result, "golden": golden.get(name)}
        for name, result in results.items()
    }
    same = all(r["same"] for r in report.values())
    print(json.dumps({"same": same, "workloads": report}))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
