"""The Slurm dialect: options, directives, precedence, arrays, dependencies, patterns, conf."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.dialects.slurm import (
    Dependee,
    PatternFields,
    SbatchRequest,
    build_request,
    evaluate,
    expand_pattern,
    parse_array,
    parse_dependency,
    parse_memory_mb,
    parse_sbatch_args,
    read_directives,
    read_slurm_conf,
    to_submission,
)
from phalanx.errors import Invalid
from phalanx.model import ClusterQueue, Node, ResourceFlavor
from tests.shared import needs_shared, shared_path

SEED = shared_path("examples", "seed", "llama3-70b-finetune.sbatch")
needs_seed = needs_shared("examples", "seed", "llama3-70b-finetune.sbatch")
GiB = 1 << 30


def req(
    argv: list[str], text: str | None = None, env: dict[str, str] | None = None, **kw: object
) -> SbatchRequest:
    return build_request(
        argv, script_text=text, script_path=None, env=env or {}, cwd="/home/u", now=0.0,
        user="u", **kw,  # type: ignore[arg-type]
    )  # fmt: skip


# ---------------------------------------------------------------- options


def test_option_forms() -> None:
    o, rest = parse_sbatch_args(
        ["-N2", "-n", "16", "--job-name=x", "--part", "gpu", "-Hv", "s.sh", "-N3"]
    )
    assert (o.nodes, o.ntasks, o.job_name, o.partition, o.hold, o.verbose) == (
        (2, 2),
        16,
        "x",
        "gpu",
        True,
        1,
    )
    assert rest == ["s.sh", "-N3"]
    assert parse_sbatch_args(["--nodes=2-4", "--", "-x"])[0].nodes == (2, 4)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--foo"], "sbatch: unrecognized option '--foo'"),
        (["-z"], "sbatch: invalid option -- 'z'"),
        (["--time"], "sbatch: option '--time' requires an argument"),
        (["-t"], "sbatch: option requires an argument -- 't'"),
        (["--hold=yes"], "sbatch: option '--hold' doesn't allow an argument"),
    ],
)
def test_getopt_errors(argv: list[str], message: str) -> None:
    with pytest.raises(Invalid) as info:
        parse_sbatch_args(argv)
    assert info.value.detail == f'{message}\nTry "sbatch --help" for more information'


def test_values() -> None:
    o, _ = parse_sbatch_args(
        ["--gpus-per-node=h100:8", "--gres=gpu:a100:4", "--mem=1000G", "--time=30:15",
         "--exclusive", "--signal=B:USR1@120", "--nice", "--export=ALL,A=1,B",
         "--switches=2@10", "--open-mode=append", "--requeue", "--no-requeue"]
    )  # fmt: skip
    assert o.gpus_per_node is not None and (o.gpus_per_node.type, o.gpus_per_node.count) == (
        "h100",
        8,
    )
    assert o.gres is not None and o.gres[0].type == "a100" and o.gres[0].count == 4
    assert o.mem == 1024000 and o.time == 31 * 60 and o.exclusive == "node"
    assert o.signal is not None and (o.signal.signal, o.signal.seconds, o.signal.batch_only) == (
        10,
        120,
        True,
    )
    assert o.nice == 100 and o.switches == (2, 600) and o.open_mode == "append"
    assert o.requeue is False
    assert o.export is not None and o.export.variables == (("A", "1"), ("B", None))


def test_rejected_option_is_named() -> None:
    with pytest.raises(Invalid, match="--reservation is not supported"):
        parse_sbatch_args(["--reservation=r"])


def test_a_value_the_submission_rejects_names_the_option_that_set_it() -> None:
    """Checked by the submission model, not the option parser: the error still names
    the sbatch option to change, not the submission's field."""
    script = "#!/bin/sh\ntrue\n"
    with pytest.raises(Invalid) as exc:
        to_submission(req(["--comment", "x" * 5000], script), env={})
    assert exc.value.detail.startswith("sbatch: error: Batch job submission failed: --comment: ")
    with pytest.raises(Invalid) as exc:
        to_submission(req(["--comment", "--job-name=" + "9" * 5000], script), env={})
    assert "--comment: " in exc.value.detail


@pytest.mark.parametrize(
    ("text", "mb"), [("512", 512), ("1000G", 1024000), ("1T", 1 << 20), ("1500K", 2), ("4gb", 4096)]
)
def test_memory(text: str, mb: int) -> None:
    assert parse_memory_mb(text) == mb


# ---------------------------------------------------------------- script


def test_script_errors() -> None:
    cases = {
        "": "sbatch: error: Batch script is empty!",
        " \n\t\n": "sbatch: error: Batch script contains only whitespace!",
        "echo hi\n": "sbatch: error: This does not look like a batch script.  The first\n"
        "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
        "sbatch: error: For instance: #!/bin/sh",
        "#!/bin/sh\r\necho\r\n": "sbatch: error: Batch script contains DOS line breaks (\\r\\n)\n"
        "sbatch: error: instead of expected UNIX line breaks (\\n).",
        "#!/bin/sh\n\0": "sbatch: error: The batch script contains a NULL character",
    }
    for text, message in cases.items():
        with pytest.raises(Invalid) as info:
            read_directives(text, "s.sh")
        assert info.value.detail == message


def test_column_zero_comments_and_stop() -> None:
    text = (
        "#!/bin/bash\n#SBATCH -N 2 --time=10 # ten minutes\n  #SBATCH -N 9\n# SBATCH -N 8\n\n"
        "#SBATCH -J 'a b'\necho go\n#SBATCH -N 7\n"
    )
    found = read_directives(text, "s.sh")
    assert [d.argv for d in found.directives] == [("-N", "2", "--time=10"), ("-J", "a b")]
    assert any("after the first command" in w for w in found.warnings)


@needs_seed
def test_seed_strict_names_every_defect() -> None:
    with pytest.raises(Invalid) as info:
        read_directives(SEED.read_text(), "llama.sbatch")
    detail = info.value.detail
    assert "llama.sbatch: line 2: `//` is not a comment in a shell script" in detail
    assert (
        "the 10 directives below (lines 7-16) would be ignored. Fix: start the line with `#`"
        in detail
    )
    for line in range(24, 32):
        assert f"llama.sbatch: line {line} ends with `\\\\`" in detail
    assert "Fix: end it with a single `\\`." in detail
    assert "line 32 ends" not in detail


@needs_seed
def test_seed_lenient_submission() -> None:
    r = req([str(SEED)], lenient=True)
    o = r.options
    assert (o.nodes, o.ntasks_per_node, o.cpus_per_task, o.mem) == ((2, 2), 8, 12, 1024000)
    assert o.gpus_per_node is not None and o.gpus_per_node.count == 8
    assert (o.partition, o.exclusive, o.output) == ("gpu-h100-dedicated", "node", "logs/%x-%j.out")
    assert r.warnings
    sub = to_submission(r, env={"HOME": "/home/u"})
    (ps,) = sub.pod_sets
    assert (ps.count, ps.tasks_per_node, ps.exclusive) == (2, 1, True)
    assert ps.requests == {"nvidia.com/gpu": 8, "cpu": 96000, "memory": 1000 * GiB}
    assert sub.cluster_queue == "gpu-h100-dedicated" and sub.name == "llama3-70b-finetune"
    assert sub.run.output == "logs/%x-%j.out" and sub.run.open_mode == "truncate"
    assert sub.slurm is not None and sub.slurm.ntasks_per_node == 8 and sub.slurm.nodes == 2


@needs_seed
def test_fixed_seed_reads_cleanly() -> None:
    text = SEED.read_text().replace("// ", "# ").replace("//", "#").replace("\\\\\n", "\\\n")
    r = req([], text=text)
    # Only the script's third defect is left: srun starts 16 torchrun agents for 2 nodes.
    assert r.script == text and [w for w in r.warnings if "torchrun" not in w] == []


# ---------------------------------------------------------------- precedence and mapping

SCRIPT = "#!/bin/sh\n#SBATCH -p script -t 10 -J fromscript --mem=1G\nsrun true\n"


def test_precedence_script_env_cli() -> None:
    assert req([], SCRIPT).options.partition == "script"
    env = {"SBATCH_PARTITION": "env", "SBATCH_TIMELIMIT": "20", "SBATCH_MEM_PER_CPU": "100"}
    r = req([], SCRIPT, env)
    assert (r.options.partition, r.options.time, r.options.job_name) == ("env", 1200, "fromscript")
    assert (r.options.mem, r.options.mem_per_cpu) == (None, 100)
    r = req(["-p", "cli", "--mem=5G"], SCRIPT, env)
    assert (r.options.partition, r.options.mem, r.options.mem_per_cpu) == ("cli", 5120, None)


def test_wrap_and_defaults() -> None:
    r = req(["--wrap", "hostname"])
    assert r.script == "#!/bin/sh\n# This script was created by sbatch --wrap.\n\nhostname\n"
    sub = to_submission(r, env={"A": "1"})
    assert sub.name == "wrap" and sub.run.output == "slurm-%j.out" and sub.run.env == {"A": "1"}
    assert sub.cluster_queue is None and sub.run.time_limit is None and sub.requeue is False
    assert sub.pod_sets[0].count == 1 and sub.pod_sets[0].requests == {"cpu": 1000}
    with pytest.raises(Invalid, match="Script arguments not permitted with --wrap option"):
        req(["--wrap", "x", "script.sh"])
    stdin = to_submission(
        req(["--array=0-3", "--export=NONE"], "#!/bin/sh\ntrue\n"), env={"A": "1"}
    )
    assert stdin.name == "sbatch" and stdin.run.output == "slurm-%A_%a.out" and stdin.run.env == {}


def test_task_mode_and_selectors() -> None:
    r = req(
        [
            "-n",
            "4",
            "-c",
            "2",
            "--gpus-per-task=1",
            "--mem-per-cpu=1G",
            "-C",
            "ib&nvme",
            "-w",
            "gpu1",
        ],
        "#!/bin/sh\n",
    )
    (ps,) = to_submission(r, env={}).pod_sets
    assert ps.count == 4 and ps.requests == {"nvidia.com/gpu": 1, "cpu": 2000, "memory": 2 * GiB}
    assert ps.node_selector == {
        "slurm.phalanx.io/feature-ib": "true",
        "slurm.phalanx.io/feature-nvme": "true",
    }
    assert ps.node_names == ["gpu1"] and ps.exclude_nodes == []
    (ps,) = to_submission(
        req(["-N", "2", "-w", "gpu[1,3]", "-x", "gpu2"], "#!/bin/sh\n"), env={}
    ).pod_sets
    assert (ps.count, ps.node_names, ps.exclude_nodes) == (2, ["gpu1", "gpu3"], ["gpu2"])
    for argv, match in [
        (["-C", "a|b"], "not supported"),
        (["-N", "3", "-w", "gpu[1-2]"], "names 2 node.* for a 3-node job"),
        (["-N", "1", "-w", "gpu1", "-x", "gpu1"], "Requested node configuration is not available"),
        (["-N", "3", "--gpus=8"], "cannot be divided evenly"),
        (["--gpus-per-task=1"], "requires an explicit task count"),
        (["--mem=1G", "--mem-per-cpu=1G"], "mutually exclusive"),
    ]:
        with pytest.raises(Invalid, match=match):
            to_submission(req(argv, "#!/bin/sh\n"), env={})


def test_directive_errors_name_the_line() -> None:
    with pytest.raises(Invalid, match=r"s.sh: line 3: unrecognized option '--bogus'"):
        build_request(["s.sh"], script_text="#!/bin/sh\n\n#SBATCH --bogus\n", script_path=None,
                      env={}, cwd="/", now=0, user="u")  # fmt: skip
    with pytest.raises(Invalid, match="Invalid directive found in batch script: stray"):
        req([], "#!/bin/sh\n#SBATCH -N1 stray\n")


# ---------------------------------------------------------------- arrays, dependencies, patterns


@pytest.mark.parametrize(
    ("text", "indices", "throttle"),
    [
        ("0-15", list(range(16)), None),
        ("0,6,16-32", [0, 6, *range(16, 33)], None),
        ("1,3,5,7", [1, 3, 5, 7], None),
        ("0-15:4", [0, 4, 8, 12], None),
        ("1-7:2", [1, 3, 5, 7], None),
        ("0-15%4", list(range(16)), 4),
        ("1-3,8,10-20:5%2", [1, 2, 3, 8, 10, 15, 20], 2),
        ("0-1000", list(range(1001)), None),
    ],
)
def test_arrays(text: str, indices: list[int], throttle: int | None) -> None:
    spec = parse_array(text)
    assert (spec.indices, spec.throttle, spec.text) == (indices, throttle, text)


@pytest.mark.parametrize("text", ["", "a", "5-1", "0-4000001", "1-4:0", "1-3%x", "1,,2", "-1"])
def test_bad_arrays(text: str) -> None:
    with pytest.raises(Invalid, match="sbatch: error: Invalid job array specification"):
        parse_array(text)


def test_array_indices_below_max_array_size() -> None:
    # The client parses up to the largest MaxArraySize a slurm.conf may set; the server
    # checks its own (tests/control/test_max_array_size.py).
    assert parse_array("0-4000").indices[-1] == 4000
    assert parse_array("4000000").indices == [4000000]
    with pytest.raises(Invalid, match=r"--array=0-1001: index 1001 is above the maximum 1000 "):
        parse_array("0-1001", max_size=1001)
    assert parse_array("0-1000", max_size=1001).indices[-1] == 1000
    with pytest.raises(Invalid, match=r"--array=0-4000001: index 4000001 is above the maximum "):
        parse_array("0-4000001")
    with pytest.raises(Invalid, match=r"job arrays are disabled \(MaxArraySize=0\)"):
        parse_array("0", max_size=0)


def test_dependency_grammar() -> None:
    d = parse_dependency("afterok:12_3:13,afterany:14,singleton")
    assert [(t.kind, t.job_id, t.array_task, t.minutes) for t in d.terms] == [
        ("afterok", 12, 3, 0), ("afterok", 13, None, 0), ("afterany", 14, None, 0),
        ("singleton", None, None, 0),
    ]  # fmt: skip
    assert d.format() == "afterok:12_3:13,afterany:14,singleton" and not d.any_of
    assert parse_dependency("after:5+10?afternotok:6").any_of
    assert parse_dependency("123").format() == "afterany:123"
    assert [t.array_task for t in parse_dependency("afterok:7_[1-3]").terms] == [1, 2, 3]
    for bad in ["afterok:20,afterany:23?after:1", "afterx:1", "afterok:", "afterok:1+5", ""]:
        with pytest.raises(Invalid, match="Job dependency problem"):
            parse_dependency(bad)


def test_dependency_evaluation() -> None:
    states = {1: [Dependee("COMPLETED", 0.0)], 2: [Dependee("FAILED", 0.0)],
              3: [Dependee("RUNNING", 100.0)], 4: [Dependee("PENDING")]}  # fmt: skip

    def lookup(job: int, task: int | None) -> list[Dependee] | None:
        return states.get(job)

    def ev(text: str, now: float = 1000.0) -> str:
        return evaluate(parse_dependency(text), lookup, now=now)

    assert (
        ev("afterok:1") == "satisfied"
        and ev("afterok:2") == "never"
        and ev("afterok:3") == "waiting"
    )
    assert ev("afternotok:2") == "satisfied" and ev("afternotok:1") == "never"
    assert ev("afterany:2") == "satisfied" and ev("afterany:3") == "waiting"
    assert (
        ev("after:3") == "satisfied"
        and ev("after:3+20") == "waiting"
        and ev("after:4") == "waiting"
    )
    assert ev("afterok:2?afterok:1") == "satisfied" and ev("afterok:2,afterok:1") == "never"
    assert ev("afterok:99") == "satisfied"  # the job is gone: Slurm lifts the dependency
    assert (
        evaluate(parse_dependency("singleton"), lookup, now=0, singleton_clear=False) == "waiting"
    )


def test_patterns() -> None:
    f = PatternFields(job_id=128, job_name="train", user="ann", node="gpu1.cluster")
    assert expand_pattern("job%J.out", PatternFields(job_id=128, step=0)) == "job128.0.out"
    assert expand_pattern("job%4j.out", f) == "job0128.out"
    assert expand_pattern("job%2j-%2t.out", f) == "job128-00.out"
    assert expand_pattern("%x-%j-%u-%N-%n-%s-%%-%q", f) == "train-128-ann-gpu1-0-batch-%-%q"
    assert expand_pattern("%A_%a.out", f) == "128_4294967294.out"
    arr = PatternFields(job_id=37, array_job_id=36, array_task_id=12)
    assert expand_pattern("%A_%3a_%b", arr) == "36_012_2"
    assert expand_pattern("%12j", f) == "0000000128"
    assert expand_pattern("out\\%j\\\\x", f) == "out%jx"


# ---------------------------------------------------------------- slurm.conf

CONF = """\
# a cluster
NodeName=DEFAULT CPUs=64 RealMemory=512000 State=UNKNOWN
NodeName=gpu[1-2] Gres=gpu:h100:8 Features=ib,nvme  # two GPU nodes
NodeName=cpu1 \\
   CPUs=32 realmemory=1000 State=DOWN
SchedulerType=sched/backfill
PartitionName=gpu Nodes=gpu[1-2] Default=YES DefaultTime=01:00:00 MaxTime=2-0 State=UP
partitionname=all Nodes=ALL MaxTime=INFINITE State=DOWN
"""


def test_slurm_conf() -> None:
    objs = read_slurm_conf(CONF, "slurm.conf")
    nodes = {o.name: o for o in objs if isinstance(o, Node)}
    assert set(nodes) == {"gpu1", "gpu2", "cpu1"}
    g = nodes["gpu1"]
    assert g.capacity == {"cpu": 64000, "memory": 512000 << 20, "nvidia.com/gpu": 8}
    assert g.labels["slurm.phalanx.io/partition-gpu"] == "true"
    assert g.labels["slurm.phalanx.io/partition-all"] == "true"
    assert (
        g.labels["slurm.phalanx.io/feature-ib"] == "true"
        and g.labels["kubernetes.io/hostname"] == "gpu1"
    )
    assert nodes["cpu1"].state.value == "down" and nodes["cpu1"].capacity["cpu"] == 32000
    flavors = [o for o in objs if isinstance(o, ResourceFlavor)]
    assert next(f.node_labels for f in flavors) == {"slurm.phalanx.io/partition-gpu": "true"}
    queues = {o.name: o for o in objs if isinstance(o, ClusterQueue)}
    gpu = queues["gpu"]
    assert gpu.annotations["slurm.phalanx.io/default-partition"] == "true"
    assert gpu.annotations["slurm.phalanx.io/default-time"] == "3600"
    assert gpu.annotations["slurm.phalanx.io/max-time"] == "172800"
    quota = {r.name: r.nominal_quota for r in gpu.resource_groups[0].flavors[0].resources}
    assert quota == {"cpu": 128000, "memory": 2 * 512000 << 20, "nvidia.com/gpu": 16}
    assert queues["all"].stop_policy.value == "Hold"
    assert "max-time" not in str(queues["all"].annotations)


def test_slurm_conf_errors() -> None:
    with pytest.raises(Invalid, match=r"slurm\.conf:1"):
        read_slurm_conf("NodeName=n[1-\n")
    with pytest.raises(Invalid, match="has no NodeName line"):
        read_slurm_conf("NodeName=a\nPartitionName=p Nodes=b\n")


# ---------------------------------------------------------------- properties


@given(st.text(max_size=60))
def test_parsers_raise_only_invalid(text: str) -> None:
    for parse in (
        parse_array,
        parse_dependency,
        parse_memory_mb,
        read_slurm_conf,
        lambda t: parse_sbatch_args(t.split()),
    ):
        with contextlib.suppress(Invalid):
            parse(text)


@given(st.text(max_size=200))
def test_script_reader_raises_only_invalid(text: str) -> None:
    for lenient in (False, True):
        try:
            read_directives("#!/bin/sh\n" + text, "s.sh", lenient=lenient)
            req([], "#!/bin/sh\n" + text, lenient=lenient)
        except Invalid:
            pass


@needs_seed
def test_srun_torchrun_with_several_tasks_per_node_is_warned() -> None:
    from phalanx.dialects.slurm import build_request

    seed = SEED.read_text()
    corrected = "\n".join(
        ("#" + line[2:] if line.startswith("//") else line).replace("\\\\", "\\")
        for line in seed.split("\n")
    )
    req = build_request(
        ["job.sbatch"],
        script_text=corrected,
        script_path="job.sbatch",
        env={},
        cwd="/",
        now=0.0,
        user="u",
    )
    [warning] = [w for w in req.warnings if "torchrun" in w]
    assert "job.sbatch: line 24" in warning and "--ntasks-per-node=1" in warning
    fixed = corrected.replace("srun --container", "srun --ntasks-per-node=1 --container")
    req = build_request(
        ["job.sbatch"],
        script_text=fixed,
        script_path="job.sbatch",
        env={},
        cwd="/",
        now=0.0,
        user="u",
    )
    assert not [w for w in req.warnings if "torchrun" in w]


def test_switches_become_the_pod_sets_topology_request() -> None:
    (ps,) = to_submission(req(["-N", "4", "--switches=1@10:00"], "#!/bin/sh\n"), env={}).pod_sets
    assert ps.topology is not None
    assert (ps.topology.switches, ps.topology.wait_s) == (1, 600)
    # Without @max-time: Slurm's max_switch_wait, 300 s.
    (ps,) = to_submission(req(["-N", "4", "--switches=2"], "#!/bin/sh\n"), env={}).pod_sets
    assert ps.topology is not None and (ps.topology.switches, ps.topology.wait_s) == (2, 300)
    (ps,) = to_submission(req(["-N", "4", "--switches=0"], "#!/bin/sh\n"), env={}).pod_sets
    assert ps.topology is None
    r = req(["-N", "4", "--switches=1@10:00"], "#!/bin/sh\n")
    assert not [w for w in r.warnings if "switches" in w]


def test_requeue_expedite() -> None:
    assert parse_sbatch_args(["--requeue=expedite"])[0].requeue == "expedite"
    assert parse_sbatch_args(["--requeue"])[0].requeue is True
    sub = to_submission(req(["--requeue=expedite", "--wrap", "true"]), env={})
    assert (sub.requeue, sub.requeue_expedite) == (True, True)
    sub = to_submission(req(["--requeue", "--wrap", "true"]), env={})
    assert (sub.requeue, sub.requeue_expedite) == (True, None)
    sub = to_submission(req([], "#!/bin/sh\n#SBATCH --requeue=expedite\ntrue\n"), env={})
    assert sub.requeue_expedite is True
    with pytest.raises(Invalid) as info:
        parse_sbatch_args(["--requeue=fast"])
    assert "Invalid --requeue argument: fast (expected no value or expedite)" in info.value.detail
