"""Table rows: the columns and cells kubectl get prints."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from phalanx.api.kube import workload
from phalanx.kubeapi.resources import RESOURCES, Resource, by_kind
from phalanx.kubeapi.tables import cells, columns, evaluate, human_duration, table
from phalanx.store import JobRow

NOW = 1_800_000_000.0


def ts(ago: float) -> str:
    return datetime.fromtimestamp(NOW - ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def res(api_version: str, kind: str) -> Resource:
    r = by_kind(api_version, kind)
    assert r is not None
    return r


def names(r: Resource, priority: int | None = None) -> list[str]:
    return [c["name"] for c in columns(r) if priority is None or c["priority"] == priority]


SECOND, MINUTE, HOUR, DAY = 1, 60, 3600, 86400


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-2, "<invalid>"),
        (-1.5, "0s"),
        (-0.5, "0s"),
        (0, "0s"),
        (5, "5s"),
        (119.9, "119s"),
        (120, "2m"),
        (123, "2m3s"),
        (9 * MINUTE + 59, "9m59s"),
        (10 * MINUTE + 59, "10m"),
        (179 * MINUTE + 59, "179m"),
        (3 * HOUR, "3h"),
        (3 * HOUR + 5 * MINUTE + 59, "3h5m"),
        (7 * HOUR + 59 * MINUTE, "7h59m"),
        (8 * HOUR + 30 * MINUTE, "8h"),
        (47 * HOUR + 59 * MINUTE, "47h"),
        (2 * DAY, "2d"),
        (2 * DAY + 5 * HOUR, "2d5h"),
        (7 * DAY + 23 * HOUR, "7d23h"),
        (8 * DAY + 23 * HOUR, "8d"),
        (729 * DAY, "729d"),
        (730 * DAY, "2y"),
        (731 * DAY, "2y1d"),
        (3 * 365 * DAY, "3y"),
        (8 * 365 * DAY + 100 * DAY, "8y"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_every_resource_has_columns_matching_its_cells() -> None:
    obj = {"metadata": {"name": "x", "creationTimestamp": ts(5)}}
    for r in RESOURCES:
        defs = columns(r)
        assert defs and all(
            set(c) == {"name", "type", "format", "description", "priority"} for c in defs
        )
        assert len(cells(r, obj, NOW)) == len(defs), r


def test_clusterqueue_columns_are_the_crds() -> None:
    cq = res("kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert names(cq) == ["Name", "Cohort", "Strategy", "Pending Workloads", "Admitted Workloads"]
    assert names(cq, 1) == ["Strategy", "Admitted Workloads"]
    assert columns(cq)[0]["format"] == "name"
    obj = {
        "metadata": {"name": "a", "creationTimestamp": ts(10)},
        "spec": {"cohortName": "all", "queueingStrategy": "StrictFIFO"},
        "status": {"pendingWorkloads": 3, "admittedWorkloads": 1},
    }
    assert cells(cq, obj, NOW) == ["a", "all", "StrictFIFO", 3, 1]
    assert cells(cq, {"metadata": {"name": "b"}}, NOW) == ["b", None, None, None, None]
    v1beta1 = res("kueue.x-k8s.io/v1beta1", "ClusterQueue")
    assert cells(v1beta1, {"metadata": {"name": "a"}, "spec": {"cohort": "c"}}, NOW)[1] == "c"


def test_default_crd_columns_are_name_and_age() -> None:
    for kind in ("ResourceFlavor", "Cohort", "Topology"):
        r = res("kueue.x-k8s.io/v1beta2", kind)
        assert names(r) == ["Name", "Age"]
        assert columns(r)[1]["type"] == "date"
        assert cells(r, {"metadata": {"name": "f", "creationTimestamp": ts(150)}}, NOW) == [
            "f",
            "2m30s",
        ]
    lq = res("kueue.x-k8s.io/v1beta2", "LocalQueue")
    assert names(lq) == ["Name", "ClusterQueue", "Pending Workloads", "Admitted Workloads"]
    wpc = res("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass")
    assert cells(wpc, {"metadata": {"name": "p"}, "value": 100}, NOW) == ["p", 100]


def _row(**kw: Any) -> JobRow:
    base: dict[str, Any] = dict(
        id=7,
        name="train",
        tenant="team-a",
        user="alice",
        queue="lq",
        cluster_queue="cq",
        priority_class=None,
        priority=None,
        state="PENDING",
        reason="",
        message="",
        flavor=None,
        nodes=[],
        gpus=0,
        submission={"podSets": [{"name": "main", "count": 2, "requests": {"cpu": "1"}}]},
        assignment=None,
        submit_time=NOW - 200,
        start_time=None,
        end_time=None,
        exit_code=None,
        signal=None,
        cancel_requested=False,
        attempt=0,
    )
    base.update(kw)
    return JobRow(**base)


def test_workload_rows_from_phalanx_workloads() -> None:
    wl = res("kueue.x-k8s.io/v1beta2", "Workload")
    assert names(wl) == ["Name", "Queue", "Reserved in", "Admitted", "Finished", "Age"]
    pending = workload(_row(), [])
    assert cells(wl, pending, NOW) == ["job-7", "lq", None, None, None, "3m20s"]
    done = workload(
        _row(
            state="COMPLETED",
            end_time=NOW - 10,
            start_time=NOW - 100,
            assignment={"admit": {"cluster_queue": "cq", "pod_sets": []}},
        ),
        [],
    )
    row = cells(wl, done, NOW)
    assert row[:2] == ["job-7", "lq"] and row[2] == "cq" and row[4] == "True"
    # The conditions filter picks the Admitted condition's status.
    admitted = {
        **done,
        "status": {
            **done["status"],
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {"type": "Admitted", "status": "False"},
            ],
        },
    }
    assert cells(wl, admitted, NOW)[3] == "False"


def test_evaluate() -> None:
    obj = {"a": {"b": [1, 2, 3]}, "c": [{"type": "X", "v": 1}, {"type": "Y", "v": 2}]}
    assert evaluate(".a.b", obj) == [[1, 2, 3]]
    assert evaluate(".a.b[0]", obj) == [1]
    assert evaluate(".a.b[-1:]", obj) == [3]
    assert evaluate('.c[?(@.type=="Y")].v', obj) == [2]
    assert evaluate(".c[?(@.type=='X')].v", obj) == [1]
    assert evaluate(".missing.x", obj) == []
    with pytest.raises(ValueError):
        evaluate("..a", obj)


def job(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "creationTimestamp": ts(700)},
        "spec": {
            "completions": 4,
            "parallelism": 2,
            "selector": {"matchLabels": {"b": "2", "a": "1"}},
            "template": {
                "spec": {
                    "containers": [{"name": "x", "image": "i:1"}, {"name": "y", "image": "i:2"}]
                }
            },
        },
        "status": status,
    }


def test_job_rows() -> None:
    r = res("batch/v1", "Job")
    assert names(r, 0) == ["Name", "Status", "Completions", "Duration", "Age"]
    assert names(r, 1) == ["Containers", "Images", "Selector"]
    running = cells(r, job(startTime=ts(650), succeeded=1), NOW)
    assert running == ["j", "Running", "1/4", "10m", "11m", "x,y", "i:1,i:2", "a=1,b=2"]
    complete = job(
        startTime=ts(650),
        completionTime=ts(50),
        succeeded=4,
        conditions=[{"type": "Complete", "status": "True"}],
    )
    assert cells(r, complete, NOW)[1:4] == ["Complete", "4/4", "10m"]
    suspended = job(conditions=[{"type": "Suspended", "status": "True"}])
    assert cells(r, suspended, NOW)[1:4] == ["Suspended", "0/4", ""]
    no_completions = job()
    no_completions["spec"].pop("completions")
    assert cells(r, no_completions, NOW)[2] == "0/1 of 2"
    no_completions["spec"].pop("selector")
    assert cells(r, no_completions, NOW)[7] == "<none>"


def test_pod_rows() -> None:
    r = res("v1", "Pod")
    assert names(r, 0) == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert names(r, 1) == ["IP", "Node", "Nominated Node", "Readiness Gates"]
    pod = {
        "metadata": {"name": "p", "creationTimestamp": ts(61)},
        "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
        "status": {
            "phase": "Running",
            "podIPs": [{"ip": "10.1.1.1"}],
            "containerStatuses": [
                {
                    "name": "a",
                    "ready": True,
                    "restartCount": 2,
                    "state": {"running": {}},
                    "lastState": {"terminated": {"finishedAt": ts(30)}},
                },
                {
                    "name": "b",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                },
            ],
        },
    }
    assert cells(r, pod, NOW) == [
        "p",
        "1/2",
        "CrashLoopBackOff",
        "2 (30s ago)",
        "61s",
        "10.1.1.1",
        "n1",
        "<none>",
        "<none>",
    ]
    pending = {
        "metadata": {"name": "q"},
        "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Pending"},
    }
    assert cells(r, pending, NOW)[:5] == ["q", "0/1", "Pending", "0", "<unknown>"]
    done = {
        "metadata": {"name": "d"},
        "spec": {"containers": [{"name": "a"}]},
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [
                {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
            ],
        },
    }
    assert cells(r, done, NOW)[2] == "Completed"
    rows = table(r, [done], NOW)["rows"]
    assert rows[0]["conditions"][0]["reason"] == "Succeeded"
    deleting = {**pending, "metadata": {"name": "q", "deletionTimestamp": ts(1)}}
    assert cells(r, deleting, NOW)[2] == "Terminating"


def test_node_rows() -> None:
    r = res("v1", "Node")
    assert names(r, 0) == ["Name", "Status", "Roles", "Age", "Version"]
    node = {
        "metadata": {
            "name": "n1",
            "creationTimestamp": ts(3 * DAY),
            "labels": {"node-role.kubernetes.io/worker": "", "kubernetes.io/role": "gpu"},
        },
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.30.0", "osImage": "Ubuntu"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }
    assert cells(r, node, NOW) == [
        "n1",
        "Ready,SchedulingDisabled",
        "gpu,worker",
        "3d",
        "v1.30.0",
        "10.0.0.1",
        "<none>",
        "Ubuntu",
        "<unknown>",
        "<unknown>",
    ]
    down = {
        "metadata": {"name": "n2"},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
    }
    assert cells(r, down, NOW)[1:3] == ["NotReady", "<none>"]
    assert cells(r, {"metadata": {"name": "n3"}}, NOW)[1] == "Unknown"


def test_namespace_and_event_rows() -> None:
    ns = res("v1", "Namespace")
    assert cells(
        ns,
        {"metadata": {"name": "a", "creationTimestamp": ts(5)}, "status": {"phase": "Active"}},
        NOW,
    ) == ["a", "Active", "5s"]
    ev = res("v1", "Event")
    assert names(ev, 0) == ["Last Seen", "Type", "Reason", "Object", "Message"]
    event = {
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Workload", "name": "job-7"},
        "type": "Normal",
        "reason": "Admitted",
        "message": " Admitted by ClusterQueue cq \n",
        "firstTimestamp": ts(300),
        "lastTimestamp": ts(60),
        "count": 2,
        "source": {"component": "kueue-admission"},
    }
    assert cells(ev, event, NOW) == [
        "60s",
        "Normal",
        "Admitted",
        "workload/job-7",
        "",
        "kueue-admission",
        "Admitted by ClusterQueue cq",
        "5m",
        2,
        "e1",
    ]
    v1 = res("events.k8s.io/v1", "Event")
    new = {
        "metadata": {"name": "e2"},
        "regarding": {"kind": "Pod", "name": "p"},
        "note": "x",
        "eventTime": ts(3),
        "reportingController": "phalanx",
    }
    assert cells(v1, new, NOW) == ["3s", "", "", "pod/p", "", "phalanx", "x", "3s", 1, "e2"]


def test_table_objects() -> None:
    r = res("kueue.x-k8s.io/v1beta2", "ClusterQueue")
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "a", "labels": {"t": "x"}},
        "spec": {},
    }
    t = table(r, [obj], NOW, "Metadata", resource_version="42")
    assert t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1"
    assert t["metadata"] == {"resourceVersion": "42"}
    assert t["columnDefinitions"] == columns(r)
    assert t["rows"][0]["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"name": "a", "labels": {"t": "x"}},
    }
    assert table(r, [obj], NOW, "")["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert table(r, [obj], NOW, "Object")["rows"][0]["object"] == obj
    assert table(r, [obj], NOW, "None")["rows"][0]["object"] is None
    assert table(r, [], NOW, continue_token="c")["metadata"]["continue"] == "c"
