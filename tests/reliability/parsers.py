"""Every parser of what users write, as a function of one text, and the bad-input property.

The property (:func:`check`): a parser returns normally, or raises
:class:`phalanx.errors.Invalid` (or a subclass) whose message names where the
problem is (the file and line, the option, the variable or the field path).
Any other exception, or an ``Invalid`` that does not say where, breaks it.

``test_parsers_fuzz.py`` drives these targets with hypothesis and
``bench/fuzz.py`` with atheris (coverage-guided), so both check the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from phalanx.errors import Invalid

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

SCRIPT = "job.sh"
"""The name sbatch scripts are read under (errors must name it, or the option)."""
MANIFEST = "m.yaml"
NODES_CONF = "NodeName=tux[0-15] CPUs=64 RealMemory=512000 Gres=gpu:8\nPartitionName=p Nodes=ALL\n"
"""The slurm.conf that fuzzed topology.conf files go with."""


class NotClear(AssertionError):
    """A parser broke the property: another exception, or an error that does not say where."""


@dataclass(frozen=True)
class Target:
    """One parser: how to call it on a text, and what its errors must mention."""

    name: str
    run: Callable[[str], object]
    where: Callable[[str], bool]
    """True when an error message names where the problem is."""


# ---------------------------------------------------------------- Slurm


def _sbatch_script(text: str) -> object:
    from phalanx.dialects.slurm import build_request, to_submission

    for lenient in (False, True):
        req = build_request(
            [SCRIPT], script_text=text, script_path=None, env={}, cwd="/home/u", now=0.0,
            user="u", lenient=lenient,
        )  # fmt: skip
        to_submission(req, env={})
    return None


def _sbatch_args(text: str) -> object:
    from phalanx.dialects.slurm import build_request, to_submission

    argv = text.split("\n") if "\n" in text else text.split()
    req = build_request(
        argv, script_text="#!/bin/sh\nsrun true\n", script_path=SCRIPT, env={}, cwd="/home/u",
        now=0.0, user="u",
    )  # fmt: skip
    if req.script is not None:
        to_submission(req, env={})
    return None


def sbatch_env(text: str) -> dict[str, str]:
    """The ``SBATCH_*`` variables a text stands for: each line is one variable, its first
    character choosing which and the rest its value."""
    from phalanx.dialects.slurm.options import ENV_OPTIONS

    names = [*sorted(ENV_OPTIONS), "SBATCH_REQ_SWITCH", "SBATCH_WAIT4SWITCH"]
    env: dict[str, str] = {}
    for line in text.split("\n"):
        if line:
            env[names[ord(line[0]) % len(names)]] = line[1:]
    return env


def _sbatch_env(text: str) -> object:
    from phalanx.dialects.slurm import build_request, to_submission

    env = sbatch_env(text)
    req = build_request(
        [], script_text="#!/bin/sh\nsrun true\n", script_path=SCRIPT, env=env, cwd="/home/u",
        now=0.0, user="u",
    )  # fmt: skip
    to_submission(req, env=env)
    return None


def _time(text: str) -> object:
    from phalanx.timefmt import parse_duration_seconds, parse_time_limit

    for parse in (parse_time_limit, parse_duration_seconds):
        try:
            parse(text)
        except Invalid as exc:
            # Both name the value; the option (--time=...) is the caller's to add.
            if "time" not in exc.detail:
                raise NotClear(f"the error does not say it is a time: {exc.detail!r}") from None
    from phalanx.dialects.slurm import parse_sbatch_args

    return parse_sbatch_args([f"--time={text}"])


def _option(option: str) -> Callable[[str], object]:
    """The parser of one sbatch option's value, through the command line."""

    def run(text: str) -> object:
        from phalanx.dialects.slurm import parse_sbatch_args

        return parse_sbatch_args([f"{option}={text}"])

    return run


def _array(text: str) -> object:
    from phalanx.dialects.slurm import parse_array
    from phalanx.dialects.slurm.arrays import MAX_ARRAY_SIZE_LIMIT

    spec = parse_array(text)
    if spec.indices and spec.indices[-1] >= MAX_ARRAY_SIZE_LIMIT:
        raise NotClear(f"--array={text!r} gave indices beyond the largest MaxArraySize")
    return spec


def _dependency(text: str) -> object:
    from phalanx.dialects.slurm import parse_dependency

    return parse_dependency(text)


def _memory(text: str) -> object:
    from phalanx.dialects.slurm import parse_memory_mb

    return parse_memory_mb(text, "--mem")


def _begin(text: str) -> object:
    from phalanx.dialects.slurm import parse_begin

    return parse_begin(text, 1_700_000_000.0)


def _signal(text: str) -> object:
    from phalanx.dialects.slurm import parse_signal

    return parse_signal(text)


def _hostlist(text: str) -> object:
    from phalanx.dialects.slurm import build_request, submission_dict
    from phalanx.dialects.slurm.hostlists import MAX_HOSTS, BadHostlist, expand_hostlist

    try:
        names = expand_hostlist(text)
        if len(names) > MAX_HOSTS:
            raise NotClear(f"{text!r} expanded to {len(names)} names, over {MAX_HOSTS}")
    except BadHostlist:
        pass  # the callers below say where
    req = build_request(
        ["--nodelist", text, "--exclude", text], script_text="#!/bin/sh\n", script_path=SCRIPT,
        env={}, cwd="/", now=0.0, user="u",
    )  # fmt: skip
    return submission_dict(req, env={})


def _pattern(text: str) -> object:
    """Output patterns never fail: an unknown ``%X`` is kept as written."""
    from phalanx.control.slurmjobs import expand_output
    from phalanx.dialects.slurm import PatternFields, expand_pattern

    for fields in (
        PatternFields(job_id=7, job_name="train", user="u"),
        PatternFields(job_id=7, array_job_id=5, array_task_id=2, step=3, node="n1.x"),
    ):
        expand_pattern(text, fields)
    row: Any = SimpleNamespace(
        id=7, array_job_id=None, array_task_id=None, name="j", user="u", nodes=["n1"], attempt=1
    )
    expand_output(text, row, Path("/work"))
    return _option("--output")(text)


def _slurm_conf(text: str) -> object:
    from phalanx.dialects.slurm import read_slurm_conf
    from phalanx.dialects.slurm.scheduling import read_scheduling
    from phalanx.dialects.slurm.slurmconf import topology_plugin

    topology_plugin(text, "slurm.conf")
    read_scheduling(text, "slurm.conf")
    return read_slurm_conf(text, "slurm.conf")


def _topology_conf(text: str) -> object:
    from phalanx.dialects.slurm import read_slurm_conf

    return read_slurm_conf(NODES_CONF, "slurm.conf", (text, "topology.conf"))


# ---------------------------------------------------------------- Kubernetes / Kueue


def _quantity(text: str) -> object:
    from phalanx.model.quantity import gpu_share, parse_quantity

    for resource in ("cpu", "memory", "nvidia.com/gpu"):
        try:
            parse_quantity(text, resource)
        except Invalid as exc:
            if "quantity" not in exc.detail:
                raise NotClear(f"the error does not say it is a quantity: {exc.detail!r}") from None
    return gpu_share(text)  # its errors quote the value ("got '2.5'")


def _manifest(source: str) -> Callable[[str], object]:
    def run(text: str) -> object:
        from phalanx.dialects.kueue import load_text

        return load_text(text, source)

    return run


def load_documents(docs: list[Any]) -> object:
    """The API's JSON path (documents that arrive parsed)."""
    from phalanx.dialects.kueue import load_documents as load

    return load(docs, "request")


# ---------------------------------------------------------------- where an error points

_FIELD_PATH = re.compile(r"\b[A-Za-z_]\w*(\.\w+|\[\d+\])+: ")


def _sbatch_where(message: str) -> bool:
    return any(
        mark in message
        for mark in (SCRIPT, "line ", "batch script", "Batch script", "--", "SBATCH_", "option")
    ) or bool(_FIELD_PATH.search(message))


def _every_line(pattern: str) -> Callable[[str], bool]:
    """Each problem (one per line) starts with ``pattern`` (the file and line)."""
    compiled = re.compile(pattern)
    return lambda message: all(compiled.match(line) for line in message.splitlines())


_MANIFEST_LINE = r"m\.(yaml|json)(:\d+(:\d+)?: |: \d+ (characters|bytes), over the limit)"

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("sbatch-script", _sbatch_script, _sbatch_where),
        Target("sbatch-args", _sbatch_args, _sbatch_where),
        Target("sbatch-env", _sbatch_env, lambda m: "SBATCH_" in m or "--" in m),
        Target("time", _time, lambda m: "--time" in m),
        Target("array", _array, lambda m: "--array=" in m),
        Target("dependency", _dependency, lambda m: "--dependency=" in m),
        Target("memory", _memory, lambda m: "--mem=" in m),
        Target("begin", _begin, lambda m: "--begin=" in m),
        Target("signal", _signal, lambda m: "--signal" in m),
        Target("nodes", _option("--nodes"), lambda m: "--nodes" in m or "node count" in m),
        Target("gres", _option("--gres"), lambda m: "gres" in m),
        Target("gpus", _option("--gpus-per-node"), lambda m: "--gpus-per-node" in m),
        Target("hostlist", _hostlist, lambda m: "--nodelist" in m or "--exclude" in m),
        Target("pattern", _pattern, lambda m: "--output" in m),
        Target("slurm-conf", _slurm_conf, _every_line(r"slurm\.conf:\d+: ")),
        Target("topology-conf", _topology_conf, _every_line(r"topology\.conf(:\d+)?: ")),
        Target("quantity", _quantity, lambda m: "quantity" in m or "got " in m),
        Target("manifest-yaml", _manifest("m.yaml"), _every_line(_MANIFEST_LINE)),
        Target("manifest-json", _manifest("m.json"), _every_line(_MANIFEST_LINE)),
    )
}
"""The parsers, by name (``bench/fuzz.py TARGET``)."""


def check(name: str, text: str) -> None:
    """Run the target ``name`` on ``text``; :class:`NotClear` unless the property holds."""
    target = TARGETS[name]
    try:
        target.run(text)
    except NotClear:
        raise
    except Invalid as exc:
        if not exc.detail or not target.where(exc.detail):
            raise NotClear(f"{name}: the error does not say where: {exc.detail!r}") from None
    except Exception as exc:
        raise NotClear(f"{name}: {type(exc).__name__}: {exc}"[:2000]) from exc


def check_documents(docs: list[Any]) -> None:
    """:func:`check` for :func:`load_documents`: each problem names the document."""
    try:
        load_documents(docs)
    except Invalid as exc:
        lines = exc.detail.splitlines()
        where = re.compile(r"request: (document \d+|.+ \(document \d+\)): ")
        if not lines or not all(where.match(line) for line in lines):
            raise NotClear(f"documents: the error does not say where: {exc.detail!r}") from None
    except Exception as exc:
        raise NotClear(f"documents: {type(exc).__name__}: {exc}"[:2000]) from exc


def seeds() -> dict[str, list[str]]:
    """Valid inputs of each kind from ``examples/``, to mutate."""
    yaml_files = sorted(EXAMPLES.rglob("*.yaml"))
    return {
        "yaml": [p.read_text() for p in yaml_files],
        "sbatch": [p.read_text() for p in sorted(EXAMPLES.rglob("*.sbatch"))],
        "slurm.conf": [p.read_text() for p in sorted(EXAMPLES.rglob("*.conf"))],
    }
