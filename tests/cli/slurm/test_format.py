"""Pure formatting checks of the Slurm commands against fixed job views (byte-exact layouts)."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

import pytest

import phalanx
from phalanx.cli.slurm import common, sacct, scontrol, shims, sinfo, sprio, squeue
from phalanx.cli.slurm.scancel import parse_signal

NOW = 1_700_000_000.0


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))


def local(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


RUNNING: dict[str, Any] = {
    "id": 7,
    "name": "train-llama",
    "user": "alice",
    "account": "team-a",
    "state": "RUNNING",
    "partition": "team-a",
    "nodes": ["gpu-h100-0", "gpu-h100-1"],
    "num_nodes": 2,
    "num_cpus": 192,
    "gpus": 16,
    "time_limit": 7200,
    "submit_time": iso(NOW - 4000),
    "start_time": iso(NOW - 3723),
}
PENDING: dict[str, Any] = {
    "id": 8,
    "name": "eval",
    "user": "bob",
    "account": "team-b",
    "state": "PENDING",
    "partition": "team-b",
    "slurm_reason": "Resources",
    "nodes": [],
    "num_nodes": 1,
    "num_cpus": 4,
    "submit_time": iso(NOW - 60),
}


def task(i: int, state: str = "PENDING") -> dict[str, Any]:
    return {
        "id": 100 + i,
        "array_job_id": 12,
        "array_task_id": i,
        "name": "sweep",
        "user": "alice",
        "state": state,
        "partition": "team-a",
        "slurm_reason": "JobArrayTaskLimit",
        "nodes": ["gpu-l40s-0"] if state == "RUNNING" else [],
        "start_time": iso(NOW - 5) if state == "RUNNING" else None,
    }


def test_squeue_default_layout_is_slurms() -> None:
    parts = squeue.parse_format(squeue.DEFAULT_FORMAT)
    text = squeue.format_jobs([RUNNING, PENDING], parts, now=NOW)
    assert text == (
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
        "                 7    team-a train-ll    alice  R    1:02:03      2 gpu-h100-[0-1]\n"
        "                 8    team-b     eval      bob PD       0:00      1 (Resources)\n"
    )


def test_squeue_noheader_and_custom_format() -> None:
    parts = squeue.parse_format("%i|%-6j|%.3t|%T|%l|%L|%r")
    text = squeue.format_jobs([RUNNING], parts, header=False, now=NOW)
    assert text == "7|train-|  R|RUNNING|2:00:00|57:57|None\n"
    header = squeue.format_jobs([], squeue.parse_format("%.5i %10P %D%%"), now=NOW)
    assert header == "JOBID PARTITION  NODES%\n"


def test_squeue_long_format_and_long_names() -> None:
    text = squeue.format_jobs(
        [PENDING], squeue.parse_format(squeue.LONG_FORMAT), header=True, now=NOW
    )
    assert text.splitlines()[0] == (
        "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES"
        " NODELIST(REASON)"
    )
    assert text.splitlines()[1] == (
        "                 8    team-b     eval      bob  PENDING       0:00 UNLIMITED      1"
        " (Resources)"
    )
    parts = squeue.parse_long_format("JobID:6,Name,State:.9,Reason")
    assert squeue.format_jobs([PENDING], parts, now=NOW) == (
        "JOBID NAME                    STATEREASON              \n"
        "8     eval                  PENDINGResources           \n"
    )


def test_squeue_unknown_specifier_is_rejected() -> None:
    from phalanx.errors import Invalid

    with pytest.raises(Invalid, match="Invalid job format specification: X"):
        squeue.parse_format("%X")
    with pytest.raises(Invalid):
        squeue.parse_long_format("Bogus")


def test_pending_array_tasks_collapse_and_expand() -> None:
    jobs = [task(3), task(4), task(5), task(9), task(2, "RUNNING")]
    jobs[0]["array_spec"] = "2-9%2"
    collapsed = squeue.collapse_arrays(jobs)
    parts = squeue.parse_format("%.18i %.2t %R")
    assert squeue.format_jobs(collapsed, parts, header=False, now=NOW) == (
        "      12_[3-5,9%2] PD (JobArrayTaskLimit)\n              12_2  R gpu-l40s-0\n"
    )
    summary = {**task(0), "array_task_id": None, "array_spec": "0-2"}
    expanded = squeue.expand_arrays([summary])
    assert [common.job_display_id(j) for j in expanded] == ["12_0", "12_1", "12_2"]


@pytest.mark.parametrize(
    ("seconds", "short", "long"),
    [
        (0, "0:00", "00:00:00"),
        (59, "0:59", "00:00:59"),
        (3723, "1:02:03", "01:02:03"),
        (2 * 86400 + 5, "2-00:00:05", "2-00:00:05"),
        (None, "UNLIMITED", "UNLIMITED"),
        (-1, "INVALID", "INVALID"),
    ],
)
def test_time_formats(seconds: int | None, short: str, long: str) -> None:
    assert common.short_secs(seconds) == short
    assert common.secs2time(seconds) == long


def test_states_codes_and_reasons() -> None:
    assert common.state_code("PENDING") == "PD"
    assert common.state_code("NODE_FAIL") == "NF"
    assert common.state_code("OUT_OF_MEMORY") == "OOM"
    assert common.slurm_state({"state": "ADMITTED"}) == "CONFIGURING"
    failed = {"id": 1, "state": "FAILED", "nodes": ["n1"]}
    assert common.reason_list(failed) == "(NonZeroExitCode)"
    assert common.reason_list({"id": 1, "state": "PENDING", "hold": True}) == "(JobHeldUser)"
    assert common.reason_list({"id": 1, "state": "COMPLETED", "nodes": ["n1", "n2"]}) == "n[1-2]"
    assert squeue.parse_states(["pd,R", "timeout"]) == frozenset({"PENDING", "RUNNING", "TIMEOUT"})
    assert squeue.parse_states(["all"]) is None


def test_hostlists() -> None:
    assert common.compress_hostlist(["tux2", "tux1", "tux2"]) == "tux[2,1-2]"
    assert common.compress_hostlist(["n01", "n02", "n03", "n07"]) == "n[01-03,07]"
    assert common.compress_hostlist(["a1", "b1"]) == "a1,b1"
    assert common.compress_hostlist(["login"]) == "login"
    assert common.expand_hostlist("tux[1-3]") == ["tux1", "tux2", "tux3"]
    assert common.expand_hostlist("node[01-02,07]") == ["node01", "node02", "node07"]
    assert common.expand_hostlist("rack[1-2]-n[01-02]") == [
        "rack1-n01",
        "rack1-n02",
        "rack2-n01",
        "rack2-n02",
    ]
    with pytest.raises(ValueError):
        common.expand_hostlist("n[3-1]")


def test_job_refs() -> None:
    assert common.parse_job_ref("12") == common.ArrayRef("12", 12, None)
    assert common.parse_job_ref("12_3") == common.ArrayRef("12_3", 12, [3])
    assert common.parse_job_ref("12_[1-3]") == common.ArrayRef("12_[1-3]", 12, [1, 2, 3])
    assert common.parse_job_ref("12_[1-5:2,9]") == common.ArrayRef("x", 12, [1, 3, 5, 9])
    assert common.parse_job_ref("abc") is None
    assert common.parse_job_ref("12_") is None
    assert parse_signal("TERM") == 15
    assert parse_signal("SIGUSR1") == 10
    assert parse_signal("9") == 9
    assert parse_signal("NOPE") is None


FINISHED: dict[str, Any] = {
    **RUNNING,
    "id": 9,
    "name": "x",
    "state": "FAILED",
    "exit_code": 3,
    "end_time": iso(NOW - 3600),
}
KILLED: dict[str, Any] = {**FINISHED, "id": 10, "state": "CANCELLED", "exit_code": None}
KILLED["signal"] = 15


def test_sacct_default_layout() -> None:
    fields = sacct.parse_fields(sacct.DEFAULT_FIELDS)
    text = sacct.format_jobs([RUNNING, PENDING, FINISHED, KILLED], fields, now=NOW)
    assert text == (
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode \n"
        "------------ ---------- ---------- ---------- ---------- ---------- -------- \n"
        "7            train-lla+     team-a     team-a        192    RUNNING      0:0 \n"
        "8                  eval     team-b     team-b          0    PENDING      0:0 \n"
        "9                     x     team-a     team-a        192     FAILED      3:0 \n"
        "10                    x     team-a     team-a        192  CANCELLED     0:15 \n"
    )


def test_sacct_parsable_and_widths() -> None:
    fields = sacct.parse_fields("JobID,JobName%20,State,Elapsed,Start,End,NNodes,NodeList")
    plain = sacct.format_jobs([FINISHED], fields, parsable="plain", now=NOW)
    assert plain == (
        "JobID|JobName|State|Elapsed|Start|End|NNodes|NodeList\n"
        f"9|x|FAILED|00:02:03|{local(NOW - 3723)}|{local(NOW - 3600)}|2|gpu-h100-[0-1]\n"
    )
    trailing = sacct.format_jobs([PENDING], fields, parsable="trailing", header=False)
    assert trailing == "8|eval|PENDING|00:00:00|Unknown|Unknown|1|None assigned|\n"
    wide = sacct.format_jobs([RUNNING], sacct.parse_fields("JobName%20"), header=False)
    assert wide == "         train-llama \n"
    tres = sacct.format_jobs([RUNNING], sacct.parse_fields("AllocTRES%60"), parsable="plain")
    assert tres.splitlines()[1] == "billing=192,cpu=192,gres/gpu=16,node=2"
    from phalanx.errors import Invalid

    with pytest.raises(Invalid, match='Invalid field requested: "Bogus"'):
        sacct.parse_fields("JobID,Bogus")


def test_sacct_window() -> None:
    assert sacct.in_window(FINISHED, NOW - 7200, None)
    assert not sacct.in_window(FINISHED, NOW - 60, None)
    assert not sacct.in_window(RUNNING, None, NOW - 5000)
    assert abs(sacct.parse_when("now-1hours") - (time.time() - 3600)) < 5


CQS = [
    {
        "metadata": {"name": name},
        "spec": {"resourceGroups": [{"flavors": [{"name": f} for f in flavors]}]},
        "status": {"active": True},
    }
    for name, flavors in (("team-a", ["h100", "l40s"]), ("debug", ["l40s"]))
]
FLAVORS = [
    {"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"flavor": "h100"}}},
    {"metadata": {"name": "l40s"}, "spec": {"nodeLabels": {"flavor": "l40s"}}},
]


def node(name: str, flavor: str, state: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"flavor": flavor}},
        "status": {
            "state": state,
            "capacity": {"cpu": "96", "memory": "1000Gi", "nvidia.com/gpu": "8"},
            "gpus": 8,
            "gpus_used": 0,
        },
    }


NODES = [
    node("gpu-h100-0", "h100", "allocated"),
    node("gpu-h100-1", "h100", "allocated"),
    node("gpu-h100-2", "h100", "idle"),
    node("gpu-h100-3", "h100", "mixed"),
    node("gpu-l40s-0", "l40s", "idle"),
    node("gpu-l40s-1", "l40s", "drain"),
]


def test_sinfo_default_groups_by_state() -> None:
    rows = sinfo.build_rows(CQS, FLAVORS, NODES, default="team-a")
    assert sinfo.format_rows(rows, sinfo.DEFAULT_FORMAT) == (
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
        "debug        up   infinite      1   idle gpu-l40s-0\n"
        "debug        up   infinite      1  drain gpu-l40s-1\n"
        "team-a*      up   infinite      2  alloc gpu-h100-[0-1]\n"
        "team-a*      up   infinite      2   idle gpu-h100-2,gpu-l40s-0\n"
        "team-a*      up   infinite      1    mix gpu-h100-3\n"
        "team-a*      up   infinite      1  drain gpu-l40s-1\n"
    )


def test_sinfo_node_oriented_and_format() -> None:
    rows = sinfo.build_rows(CQS, FLAVORS, NODES[4:])
    text = sinfo.format_rows(rows, sinfo.NODE_FORMAT, per_node=True)
    assert text == (
        "NODELIST    NODES PARTITION STATE \n"
        "gpu-l40s-0      1 debug     idle  \n"
        "gpu-l40s-1      1 debug     drain \n"
        "gpu-l40s-0      1 team-a    idle  \n"
        "gpu-l40s-1      1 team-a    drain \n"
    )
    custom = sinfo.format_rows(rows, "%P %c %m %G %F", header=False)
    assert custom.splitlines()[0] == "debug 96 1024000 gpu:8 0/1/1/2"


def test_scontrol_show_job_layout() -> None:
    job = {**FINISHED, "array_job_id": 5, "array_task_id": 2, "working_dir": "/w", "nice": 0}
    job["command"] = ["/w/run.sh"]
    text = scontrol.render(scontrol.job_record(job, NOW))
    lines = text.split("\n")
    assert lines[0] == "JobId=9 ArrayJobId=5 ArrayTaskId=2 JobName=x"
    assert lines[1].startswith("   UserId=alice(")
    assert "   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)" in lines
    assert "   Requeue=1 Restarts=0 BatchFlag=1 ExitCode=3:0" in lines
    assert "   RunTime=00:02:03 TimeLimit=02:00:00" in lines
    assert "   NodeList=gpu-h100-[0-1]" in lines
    assert "   NumNodes=2 NumCPUs=192 NumTasks=" in lines
    assert "   Command=/w/run.sh" in lines
    assert text.endswith("\n\n")
    one = scontrol.render(scontrol.job_record(job, NOW), oneliner=True)
    assert one.count("\n") == 1 and one.startswith("JobId=9 ArrayJobId=5 ")


def test_scontrol_hostnames_and_hostlist_are_local(capsys: pytest.CaptureFixture[str]) -> None:
    assert scontrol.run(["show", "hostnames", "tux[1-3]"], oneliner=False, details=False) == 0
    assert capsys.readouterr().out == "tux1\ntux2\ntux3\n"
    assert scontrol.run(["show", "hostlist", "tux2,tux1,tux2"], oneliner=False, details=False) == 0
    assert capsys.readouterr().out == "tux[2,1-2]\n"
    assert (
        scontrol.run(["show", "hostlistsorted", "tux2,tux1,tux2"], oneliner=False, details=False)
        == 0
    )
    assert capsys.readouterr().out == "tux[1-2,2]\n"


def test_sprio_and_sshare_print_only_known_values() -> None:
    text = sprio.format_jobs([{**PENDING, "priority": 1234}])
    assert text.splitlines() == [
        "          JOBID PARTITION   PRIORITY       SITE        AGE      ASSOC  FAIRSHARE"
        "    JOBSIZE  PARTITION        QOS TRES                ",
        "              8 team-b          1234" + " " * 98,
    ]
    # sshare's own rows and columns are checked in test_sshare.py.


def test_shims(tmp_path: Path) -> None:
    written = shims.write_shims(tmp_path / "bin", python="/opt/py")
    names = sorted(p.name for p in written)
    assert names == sorted(shims.TOOLS)
    assert {"srun", "salloc", "sattach", "sstat"} <= set(names)
    for tool in ("sbatch", "srun", "salloc"):
        shim = (tmp_path / "bin" / tool).read_text()
        assert shim.endswith(f'exec /opt/py -m phalanx.cli.main {tool} "$@"\n')
        assert (tmp_path / "bin" / tool).stat().st_mode & 0o111
    # The read-only tools start Python without site and import phalanx from where it is.
    source = str(Path(phalanx.__file__).resolve().parents[1])
    for tool in ("squeue", "sinfo", "sacct", "scontrol"):
        lines = (tmp_path / "bin" / tool).read_text().splitlines()
        assert lines[:2] == ["#!/bin/sh", f"# phalanx shim for {tool}"]
        words = shlex.split(lines[2])
        assert words[:5] == ["exec", "/opt/py", "-I", "-S", "-c"]
        assert words[6:] == [tool, "$@"]
        assert f"sys.path.insert(0, {source!r})" in words[5]
        assert "from phalanx.cli.fast import shim" in words[5]
