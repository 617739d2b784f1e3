"""Node epilogs: the environment, the runs in their own threads, slurm.conf's ``Epilog``."""

from __future__ import annotations

import stat
import time
from pathlib import Path

from phalanx.control.configs import read_health_check
from phalanx.control.epilog import EpilogDone, Epilogs, epilog_environment
from phalanx.control.health import CheckResult, run_program
from phalanx.model import Node
from phalanx.runtime.spec import Exited
from phalanx.store import JobRow


def _node(name: str) -> Node:
    return Node(name=name, capacity={"nvidia.com/gpu": 8, "cpu": 4})


def _row(**fields: object) -> JobRow:
    values: dict[str, object] = {
        "id": 7,
        "name": "train",
        "tenant": "ml",
        "user": "alice",
        "queue": None,
        "cluster_queue": "gpu",
        "priority_class": None,
        "priority": None,
        "state": "RUNNING",
        "reason": "",
        "message": "",
        "flavor": "f",
        "nodes": ["n1", "n2"],
        "gpus": 4,
        "submission": {},
        "assignment": {"gpus": {"n1": [2, 3], "n2": [0, 1]}},
        "submit_time": 0.0,
        "start_time": 10.0,
        "end_time": None,
        "exit_code": None,
        "signal": None,
        "cancel_requested": False,
        "attempt": 1,
    }
    values.update(fields)
    return JobRow(**values)  # type: ignore[arg-type]


def _exited(exit_code: int | None = 0, signum: int | None = None) -> Exited:
    return Exited(7, 1, "COMPLETED", exit_code, signum, 10.0, 42.9, "")


def test_the_environment_is_slurms() -> None:
    env = epilog_environment(_row(), _node("n1"), _exited(2))
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == "7"
    assert env["SLURM_JOB_USER"] == "alice"
    assert env["SLURM_JOB_ACCOUNT"] == "ml"
    assert env["SLURM_JOB_PARTITION"] == "gpu"
    assert env["SLURMD_NODENAME"] == env["PHALANX_NODE"] == "n1"
    assert env["SLURM_JOB_NODELIST"] == "n[1-2]"
    assert env["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmd"
    assert env["SLURM_JOB_EXIT_CODE"] == "512"  # as wait() returns exit 2
    assert env["SLURM_JOB_EXIT_CODE2"] == "2:0"
    assert env["SLURM_JOB_START_TIME"] == "10" and env["SLURM_JOB_END_TIME"] == "42"
    # The job's GPUs on this node, by their global indices.
    assert env["CUDA_VISIBLE_DEVICES"] == env["SLURM_JOB_GPUS"] == "2,3"
    assert "SLURM_ARRAY_JOB_ID" not in env
    killed = epilog_environment(
        _row(array_job_id=5, array_task_id=2), _node("n2"), _exited(None, 9)
    )
    assert killed["SLURM_JOB_EXIT_CODE"] == "9" and killed["SLURM_JOB_EXIT_CODE2"] == "0:9"
    assert killed["SLURM_ARRAY_JOB_ID"] == "5" and killed["SLURM_ARRAY_TASK_ID"] == "2"
    assert killed["CUDA_VISIBLE_DEVICES"] == "0,1"


def _wait_done(epilogs: Epilogs) -> EpilogDone:
    deadline = time.monotonic() + 30
    while True:
        done = epilogs.poll()
        if done:
            [one] = done
            return one
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_epilogs_run_per_node_and_report_the_failures(tmp_path: Path) -> None:
    script = tmp_path / "epilog.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$SLURM_JOB_ID $CUDA_VISIBLE_DEVICES" > "{tmp_path}/$SLURMD_NODENAME"\n'
        'if [ "$SLURMD_NODENAME" = n2 ]; then echo "ECC errors"; sleep 0.5; exit 3; fi\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)

    def runner(node: Node, env: dict[str, str]) -> CheckResult:
        return run_program([str(script)], node, 10.0, env=env)

    epilogs = Epilogs([str(script)], runner)
    try:
        event = _exited()
        assert epilogs.begin(event, _row(), [_node("n1"), _node("n2")], wait=True)
        # Reported again while they run: not run twice.
        assert not epilogs.begin(event, _row(), [_node("n1"), _node("n2")], wait=True)
        done = _wait_done(epilogs)
        assert done == EpilogDone(7, 1, (("n2", "ECC errors"),), event)
        assert (tmp_path / "n1").read_text() == "7 2,3\n"
        assert (tmp_path / "n2").read_text() == "7 0,1\n"
        # Not waited for: the end is not handed back, the failures are.
        for attempt, node in ((2, "n2"), (3, "n1")):
            later = Exited(7, attempt, "COMPLETED", 0, None, 50.0, 60.0, "")
            assert epilogs.begin(later, _row(attempt=attempt), [_node(node)], wait=False)
        results = [_wait_done(epilogs) for _ in range(2)]
        assert sorted(r.failed for r in results) == [(), (("n2", "ECC errors"),)]
        assert all(r.exited is None for r in results)
    finally:
        epilogs.stop()


def test_slurm_conf_sets_the_epilog(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=x\nEpilog=/etc/slurm/epilog.sh\n"
        "NodeName=n[0-1] CPUs=4 RealMemory=1000\nPartitionName=p Nodes=n[0-1] Default=YES\n"
    )
    assert read_health_check([conf]) == {"epilog": "/etc/slurm/epilog.sh"}
