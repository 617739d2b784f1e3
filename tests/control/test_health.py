"""Node health: the health program's verdicts, its environment, and the count of
node-side job failures that drains a node (``--drain-after-failures``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from phalanx.control.configs import read_health_check
from phalanx.control.health import (
    CheckResult,
    FailurePolicy,
    HealthChecker,
    NodeFailures,
    blamed_nodes,
    health_verdict,
    node_side_failure,
    run_program,
)
from phalanx.errors import Invalid
from phalanx.model import AdminState, Node
from phalanx.runtime.spec import Exited
from phalanx.store.records import JobEventRow


def _node(name: str = "n0", gpus: int = 2, **fields: object) -> Node:
    return Node(name=name, capacity={"nvidia.com/gpu": gpus, "cpu": 4}, **fields)


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "check.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# ------------------------------------------------------------------ verdicts


def test_a_failed_check_drains_an_up_node_with_its_reason() -> None:
    drained = health_verdict(_node(), CheckResult(False, "GPU 1 is hot"))
    assert drained is not None
    assert (drained.state, drained.reason) == (AdminState.DRAIN, "GPU 1 is hot")
    assert drained.health_check_reason == "GPU 1 is hot"
    # Failing again with the same reason changes nothing; a new reason replaces it.
    assert health_verdict(drained, CheckResult(False, "GPU 1 is hot")) is None
    again = health_verdict(drained, CheckResult(False, "GPU 0 is hot"))
    assert again is not None and again.reason == again.health_check_reason == "GPU 0 is hot"


def test_a_passing_check_resumes_only_its_own_drains() -> None:
    drained = health_verdict(_node(), CheckResult(False, "bad"))
    assert drained is not None
    resumed = health_verdict(drained, CheckResult(True))
    assert resumed is not None
    assert (resumed.state, resumed.reason, resumed.health_check_reason) == (AdminState.UP, "", "")
    # An admin's drain (no check reason), or one an admin re-drained with a reason of
    # its own, stays; so does a down node; an up node stays up.
    admin = _node(state=AdminState.DRAIN, reason="maintenance")
    assert health_verdict(admin, CheckResult(True)) is None
    assert health_verdict(admin, CheckResult(False, "bad")) is None
    redrained = drained.model_copy(update={"reason": "replacing the PSU"})
    assert health_verdict(redrained, CheckResult(True)) is None
    down = _node(state=AdminState.DOWN, reason="Ray node died")
    assert health_verdict(down, CheckResult(False, "bad")) is None
    assert health_verdict(_node(), CheckResult(True)) is None


def test_a_lasting_failure_is_left_for_an_admin_to_resume() -> None:
    drained = health_verdict(_node(), CheckResult(False, "GPU 3: XID 79", lasting=True))
    assert drained is not None and drained.state == AdminState.DRAIN
    assert drained.health_check_reason == ""
    assert health_verdict(drained, CheckResult(True)) is None


# ------------------------------------------------------------------ the program


def test_the_program_runs_with_the_nodes_environment(tmp_path: Path) -> None:
    out = tmp_path / "env"
    program = _script(
        tmp_path,
        f'echo "$SLURMD_NODENAME $PHALANX_NODE [$CUDA_VISIBLE_DEVICES]" > {out}\nexit 0\n',
    )
    assert run_program([program], _node("gpu-7", gpus=4)) == CheckResult(True)
    assert out.read_text() == "gpu-7 gpu-7 [0,1,2,3]\n"
    run_program([program], _node("cpu-0", gpus=0))
    assert out.read_text() == "cpu-0 cpu-0 []\n"


def test_a_failure_says_the_first_line_or_the_exit(tmp_path: Path) -> None:
    program = _script(tmp_path, 'echo\necho "  ECC errors on GPU 2  "\necho more\nexit 3\n')
    assert run_program([program], _node()) == CheckResult(False, "ECC errors on GPU 2")
    silent = _script(tmp_path, "exit 4\n")
    assert run_program([silent], _node()) == CheckResult(False, "health check failed (exit 4)")
    assert run_program(["/nonexistent/check"], _node()).ok is False


def test_a_check_that_runs_too_long_fails(tmp_path: Path) -> None:
    program = _script(tmp_path, "sleep 30\n")
    result = run_program([program], _node(), timeout_s=0.3)
    assert result == CheckResult(False, "health check timed out after 0.3 s")


def test_a_round_applies_drains_and_resumes(tmp_path: Path) -> None:
    nodes = {n.name: n for n in (_node("a"), _node("b"), _node("c", state=AdminState.DOWN))}
    bad = {"b"}
    checked: list[str] = []

    def runner(node: Node) -> CheckResult:
        checked.append(node.name)
        return CheckResult(node.name not in bad, f"{node.name} is bad")

    def apply(changed: list[Node]) -> None:
        nodes.update({n.name: n for n in changed})

    checker = HealthChecker(
        nodes=lambda: list(nodes.values()), apply=apply, runner=runner, interval_s=60
    )
    changed = checker.check_all()
    assert [(n.name, n.state) for n in changed] == [("b", AdminState.DRAIN)]
    assert sorted(checked) == ["a", "b"]  # not the down node
    assert nodes["b"].reason == "b is bad"
    bad.clear()
    assert [(n.name, n.state) for n in checker.check_all()] == [("b", AdminState.UP)]
    assert checker.check_all() == []
    # A standby checks nothing.
    standby = HealthChecker(
        nodes=lambda: list(nodes.values()),
        apply=apply,
        runner=runner,
        interval_s=60,
        leading=lambda: False,
    )
    checked.clear()
    assert standby.check_all() == [] and checked == []
    with pytest.raises(Invalid):
        HealthChecker(nodes=list, apply=apply, runner=runner, interval_s=-1)


def test_a_built_in_check_runs_after_the_program_passes() -> None:
    nodes = {"here": _node("here")}
    faults: list[tuple[str, bool] | None] = [("GPU 0: 2 uncorrected ECC errors", False)]

    def apply(changed: list[Node]) -> None:
        nodes.update({n.name: n for n in changed})

    checker = HealthChecker(
        nodes=lambda: list(nodes.values()),
        apply=apply,
        runner=None,
        extra={"here": lambda: faults[0]},
    )
    checker.check_all()
    assert nodes["here"].reason == "GPU 0: 2 uncorrected ECC errors"
    faults[0] = None
    checker.check_all()
    assert nodes["here"].state == AdminState.UP


def test_slurm_conf_sets_the_health_check(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=x\nHealthCheckProgram=/usr/sbin/nhc\nHealthCheckInterval=60\n"
        "NodeName=n[0-1] CPUs=4 RealMemory=1000\nPartitionName=p Nodes=n[0-1] Default=YES\n"
    )
    assert read_health_check([conf]) == {"program": "/usr/sbin/nhc", "interval_s": 60.0}
    conf.write_text("ClusterName=x\nHealthCheckInterval=0\n")
    assert read_health_check([conf]) == {"interval_s": 0.0}


# ------------------------------------------------------------------ job failures


def _exit(
    job_id: int,
    state: str,
    exit_code: int | None,
    *,
    attempt: int = 1,
    at: float = 0.0,
    message: str = "",
) -> Exited:
    return Exited(job_id, attempt, state, exit_code, None, 1.0, at, message)


def test_the_policy_parses() -> None:
    assert FailurePolicy.parse("3/1h") == FailurePolicy(3, 3600, "1h")
    assert FailurePolicy.parse("5/30m").window_s == 1800
    for bad in ("3", "0/1h", "x/1h", "3/soon", "3/0s"):
        with pytest.raises(Invalid, match="--drain-after-failures"):
            FailurePolicy.parse(bad)


def test_only_node_side_failures_count() -> None:
    assert node_side_failure(_exit(1, "NODE_FAIL", None))
    assert node_side_failure(_exit(1, "FAILED", None))  # supervisor lost, tasks killed
    assert not node_side_failure(_exit(1, "FAILED", 1))  # the user's non-zero exit
    assert not node_side_failure(_exit(1, "FAILED", 0))  # killed by a signal of its own
    for state in ("COMPLETED", "CANCELLED", "TIMEOUT", "PREEMPTED"):
        assert not node_side_failure(_exit(1, state, 0))


def test_n_failures_within_the_window_drain_the_node() -> None:
    counter = NodeFailures(FailurePolicy.parse("3/1h"))
    assert counter.record("n0", 12, 0.0) is None
    assert counter.record("n0", 15, 100.0) is None
    assert counter.record("n0", 15, 101.0) is None  # the same attempt told twice
    assert counter.record("n1", 16, 200.0) is None
    assert counter.record("n0", 17, 300.0) == "3 job failures in 1h: 12,15,17"
    # The count starts again once the node is drained.
    assert counter.record("n0", 18, 400.0) is None


def test_old_failures_fall_out_of_the_window() -> None:
    counter = NodeFailures(FailurePolicy.parse("2/10m"))
    assert counter.record("n0", 1, 0.0) is None
    assert counter.record("n0", 2, 600.0) is None  # the first is 10 minutes old: gone
    assert counter.record("n0", 3, 1199.0) == "2 job failures in 10m: 2,3"
    # Attempts of one job count one by one.
    assert counter.record("n1", 4, 0.0, attempt=1) is None
    assert counter.record("n1", 4, 5.0, attempt=2) == "2 job failures in 10m: 4,4"


def test_exits_are_blamed_on_the_nodes_they_name() -> None:
    counter = NodeFailures(FailurePolicy.parse("1/1h"))
    lost = _exit(7, "NODE_FAIL", None, message="node gpu-2 died")
    assert blamed_nodes(lost, ["gpu-1", "gpu-2"]) == ["gpu-2"]
    assert blamed_nodes(_exit(7, "NODE_FAIL", None), ["gpu-1", "gpu-2"]) == ["gpu-1", "gpu-2"]
    assert counter.record_exit(lost, ["gpu-1", "gpu-2"]) == [("gpu-2", "1 job failure in 1h: 7")]
    # So are the counts rebuilt after a restart: the event keeps the lost nodes.
    counter = NodeFailures(FailurePolicy.parse("2/1h"))
    history = [_ended(1, 7, 100.0, ["gpu-1", "gpu-2"], exit_lost=["gpu-2"])]
    assert counter.recover(history, now=200.0) == 1
    assert counter.record("gpu-1", 8, 300.0) is None
    assert counter.record("gpu-2", 9, 300.0) == "2 job failures in 1h: 7,9"
    assert counter.record_exit(_exit(8, "FAILED", 2), ["gpu-1"]) == []


def test_exits_are_blamed_on_the_lost_nodes_the_runtime_names() -> None:
    # The Ray runtime names the nodes it lost; the message may name others (or none).
    lost = Exited(7, 1, "NODE_FAIL", None, None, 1.0, 0.0, "gpu-1: agent died", ("gpu-2",))
    assert blamed_nodes(lost, ["gpu-1", "gpu-2", "gpu-3"]) == ["gpu-2"]
    counter = NodeFailures(FailurePolicy.parse("1/1h"))
    assert counter.record_exit(lost, ["gpu-1", "gpu-2"]) == [("gpu-2", "1 job failure in 1h: 7")]


def _ended(
    event_id: int, job_id: int, at: float, nodes: list[str], **exit_fields: object
) -> JobEventRow:
    """A Requeued/Finished event as the control plane writes it for a node-side failure."""
    data: dict[str, object] = {"attempt": 1, "end_time": at, "exit_code": None}
    data.update(failed_on=nodes, exit_state="NODE_FAIL", exit_message="")
    data.update(exit_fields)
    return JobEventRow(event_id, job_id, at, "Requeued", "NodeFail", "", data)


def test_counts_are_rebuilt_from_the_window_of_history() -> None:
    counter = NodeFailures(FailurePolicy.parse("3/1h"))
    history = [
        _ended(1, 10, 100.0, ["n0"]),  # out of the window at 4000
        _ended(2, 11, 1000.0, ["n0", "n1"], exit_message="node n1 lost"),
        _ended(3, 12, 2000.0, ["n0"]),
        _ended(4, 13, 2500.0, ["n0"], exit_state="FAILED", exit_code=1),  # the user's exit
        JobEventRow(5, 14, 2600.0, "Finished", "COMPLETED", "", {"exit_code": 0}),
    ]
    assert counter.recover(history, now=4000.0) == 2
    # n1 has 1 (the message named it), n0 has 1: the next two failures on n0 drain it.
    assert counter.record("n0", 20, 4100.0) is None
    assert counter.record("n0", 21, 4200.0) == "3 job failures in 1h: 12,20,21"
    assert counter.record("n1", 22, 4300.0) is None


def test_a_count_that_reached_the_limit_before_the_restart_starts_again() -> None:
    counter = NodeFailures(FailurePolicy.parse("2/1h"))
    history = [_ended(i, 10 + i, 100.0 * i, ["n0"]) for i in range(1, 4)]
    # The first two drained n0 then (not again now); the third counts.
    assert counter.recover(history, now=500.0) == 3
    assert counter.record("n0", 30, 600.0) == "2 job failures in 1h: 13,30"


def test_drains_are_applied_outside_the_caller() -> None:
    import threading

    drained: list[tuple[str, str]] = []
    done = threading.Event()

    def drain(node: str, reason: str) -> None:
        drained.append((node, reason))
        done.set()

    counter = NodeFailures(FailurePolicy.parse("1/1h")).start(drain)
    try:
        counter.observe(_exit(3, "NODE_FAIL", None), ["n0"])
        assert done.wait(5)
    finally:
        counter.stop()
    assert drained == [("n0", "1 job failure in 1h: 3")]
    assert os.environ.get("PHALANX_NODE") is None


def test_where_the_program_and_interval_come_from() -> None:
    from phalanx.server import _health_settings

    assert _health_settings({}, None, None) is None
    cli = _health_settings({}, "/bin/check --all", None)
    assert cli is not None and (cli.program, cli.interval_s) == (["/bin/check", "--all"], 300.0)
    # slurm.conf's program without HealthCheckInterval: Slurm's 0, at start only.
    conf = _health_settings({"program": "/usr/sbin/nhc"}, None, None)
    assert conf is not None and (conf.program, conf.interval_s) == (["/usr/sbin/nhc"], 0.0)
    both = _health_settings({"program": "/usr/sbin/nhc", "interval_s": 60.0}, "/bin/x", 5)
    assert both is not None and (both.program, both.interval_s) == (["/bin/x"], 5.0)


def test_interval_zero_checks_once_at_start() -> None:
    rounds: list[int] = []

    def runner(node: Node) -> CheckResult:
        rounds.append(1)
        return CheckResult(True)

    checker = HealthChecker(nodes=lambda: [_node()], apply=list, runner=runner, interval_s=0)
    checker.start()
    assert checker._thread is not None
    checker._thread.join(timeout=5)
    assert not checker._thread.is_alive() and rounds == [1]
    checker.stop()
