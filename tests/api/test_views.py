"""Job views and error formatting, without a server."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from fastapi.responses import JSONResponse

from phalanx.api.errors import field_path, format_errors
from phalanx.api.render import JobViewCache, dumps, list_body
from phalanx.api.views import JobView, job_view, rfc3339
from phalanx.store.records import JobRow


def row(**changes: Any) -> JobRow:
    fields: dict[str, Any] = {
        "id": 7,
        "name": "train",
        "tenant": "team-a",
        "user": "alice",
        "queue": "default",
        "cluster_queue": "team-a",
        "priority_class": "high",
        "priority": 1000,
        "state": "RUNNING",
        "reason": "",
        "message": "",
        "flavor": "h100",
        "nodes": ["gpu-0", "gpu-1"],
        "gpus": 16,
        "submission": {
            "podSets": [
                {"name": "main", "count": 2, "tasksPerNode": 1, "requests": {"nvidia.com/gpu": "8"}}
            ],
            "run": {"command": ["python", "train.py"], "workingDir": "/w", "timeLimit": 600},
        },
        "assignment": {
            "admit": {
                "cluster_queue": "team-a",
                "pod_sets": [
                    {
                        "name": "main",
                        "flavors": {"nvidia.com/gpu": "h100"},
                        "nodes": [{"node": "gpu-0", "count": 1}, {"node": "gpu-1", "count": 1}],
                    }
                ],
            },
            "gpus": {"gpu-0": [0, 1, 2, 3, 4, 5, 6, 7], "gpu-1": [0, 1, 2, 3, 4, 5, 6, 7]},
            "attempt": 1,
        },
        "submit_time": 1_796_282_470.1234,
        "start_time": 1_796_282_471.0,
        "end_time": None,
        "exit_code": None,
        "signal": None,
        "cancel_requested": False,
        "attempt": 1,
    }
    fields.update(changes)
    return JobRow(**fields)


def test_rfc3339_is_utc_with_milliseconds() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(1_796_282_470.1234) == "2026-12-03T07:21:10.123Z"
    assert rfc3339(None) is None


def test_job_view_contract() -> None:
    view = job_view(row())
    assert view["id"] == 7
    assert view["nodes"] == ["gpu-0", "gpu-1"]
    assert view["submit_time"] == "2026-12-03T07:21:10.123Z"
    assert view["end_time"] is None
    assert view["estimated_start"] is None
    assert view["command"] == ["python", "train.py"]
    assert view["time_limit"] == 600
    assert view["pod_sets"] == [
        {
            "name": "main",
            "count": 2,
            "tasks_per_node": 1,
            "requests": {"nvidia.com/gpu": "8"},
            "node_names": [],
            "flavors": {"nvidia.com/gpu": "h100"},
            "nodes": [{"node": "gpu-0", "count": 1}, {"node": "gpu-1", "count": 1}],
        }
    ]
    assert view["gpu_indices"]["gpu-1"] == list(range(8))
    JobView.model_validate(view)  # the documented schema matches what is served


def test_pending_job_view() -> None:
    view = job_view(
        row(state="PENDING", reason="Resources", assignment=None, nodes=[], start_time=None)
    )
    assert view["reason"] == "Resources"
    assert view["pod_sets"][0]["flavors"] == {}
    assert view["gpu_indices"] == {}
    assert view["start_time"] is None
    assert view["num_nodes"] == 2  # a 2-node gang, one task per node, before it is placed


@pytest.mark.parametrize(
    ("pod_sets", "nodes"),
    [
        ([{"count": 16, "tasksPerNode": 8}], 2),
        ([{"count": 3}], 1),
        ([{"count": 1}, {"count": 4, "tasksPerNode": 2}], 2),
    ],
)
def test_a_pending_jobs_nodes_are_the_fewest_it_can_run_on(
    pod_sets: list[dict[str, Any]], nodes: int
) -> None:
    pending = row(
        state="PENDING",
        assignment=None,
        nodes=[],
        start_time=None,
        submission={"podSets": pod_sets, "run": {"command": ["true"]}},
    )
    assert job_view(pending)["num_nodes"] == nodes


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        (("body", "jobs", 3, "podSets", 0, "count"), "jobs[3].podSets[0].count"),
        (("body", "run", "command"), "run.command"),
        (("body",), "body"),
        (("query", "limit"), "limit (query)"),
        (("path", "job_id"), "job_id (path)"),
        (("body", "podSets", 0, "function-after[_tasks_per_node_divides(), PodSet]"), "podSets[0]"),
    ],
)
def test_field_paths(loc: tuple[Any, ...], path: str) -> None:
    assert field_path(loc) == path


def test_format_errors_one_line_per_problem() -> None:
    text = format_errors(
        [
            {"loc": ("body", "podSets"), "msg": "Field required"},
            {"loc": ("body", "run", "timeLimit"), "msg": "Value error, must be positive"},
            {"loc": ("body", "podSets"), "msg": "Field required"},
        ]
    )
    assert text.splitlines() == ["podSets: Field required", "run.timeLimit: must be positive"]


# -- list pages: orjson and the cache of rendered views ----------------------------


def record(job: JobRow) -> tuple[Any, ...]:
    """``job`` as :meth:`Store.list_job_records` gives it (JSON columns as text)."""
    json_fields = {"nodes", "submission", "assignment"}
    return tuple(
        json.dumps(getattr(job, f.name))
        if f.name in json_fields and getattr(job, f.name) is not None
        else getattr(job, f.name)
        for f in dataclasses.fields(job)
    )


class FakePlane:
    def __init__(self) -> None:
        self.estimates: dict[int, float] = {}
        self.why = "the backfill pass has not planned it"

    def output_paths(self, job: JobRow) -> tuple[str, None]:
        return f"/out/{job.id}.out", None

    def estimated_start(self, job_id: int) -> float | None:
        return self.estimates.get(job_id)

    def no_estimate(self, job_id: int) -> str | None:
        return None if job_id in self.estimates else self.why


def test_dumps_writes_what_starlette_writes() -> None:
    for content in (
        {"items": [job_view(row())], "continue": None},
        {"é": 'ü\n"', "f": [0.1, 1e16, -0.0, 2.5e-300], "i": 2**63 - 1},
        {"big": 2**70},  # past orjson's 64 bits: the standard library's turn
        {1: "non-string key"},
    ):
        assert json.loads(dumps(content)) == json.loads(JSONResponse(content).body)
    assert dumps({"big": 2**70}) == JSONResponse({"big": 2**70}).body


def test_cached_views_are_reused_only_while_the_job_and_its_estimate_are_unchanged() -> None:
    plane = FakePlane()
    cache = JobViewCache(plane)  # type: ignore[arg-type]
    jobs = [row(id=i, state="PENDING", nodes=[], assignment=None) for i in (1, 2, 3)]
    first = cache.render([record(j) for j in jobs])
    assert [json.loads(b) for b in first] == [
        json.loads(dumps(job_view(j, plane.output_paths(j), None, plane.why))) for j in jobs
    ]
    assert json.loads(first[0])["no_estimate"] == plane.why
    again = cache.render([record(j) for j in jobs])
    assert all(a is b for a, b in zip(first, again, strict=True))  # reused
    plane.estimates[2] = 1_796_282_480.0
    jobs[0] = dataclasses.replace(jobs[0], state="RUNNING")
    third = cache.render([record(j) for j in jobs])
    assert json.loads(third[0])["state"] == "RUNNING"
    assert json.loads(third[1])["estimated_start"] == "2026-12-03T07:21:20.000Z"
    assert json.loads(third[1])["no_estimate"] is None
    assert json.loads(third[0])["no_estimate"] is None  # not pending
    assert third[2] is first[2]
    plane.why = "it cannot start within the planning window (24 h)"
    fourth = cache.render([record(j) for j in jobs])
    assert json.loads(fourth[2])["no_estimate"] == plane.why  # the reason is part of the key


def test_a_stored_job_is_rendered_again_when_its_revision_changes() -> None:
    """Rows from the store carry the revision of their last change: the view is kept
    by it (not by the whole row), and made again for a new one."""
    plane = FakePlane()
    cache = JobViewCache(plane)  # type: ignore[arg-type]
    job = row(id=1, state="PENDING", nodes=[], assignment=None, revision=7)
    first = cache.render([record(job)])
    assert cache.render([record(job)])[0] is first[0]
    running = dataclasses.replace(job, state="RUNNING", revision=8)
    again = cache.render([record(running)])
    assert json.loads(again[0])["state"] == "RUNNING"
    assert cache._entries[1][0] == 8  # the revision, not the row, is kept


def test_the_view_cache_keeps_the_newest_entries() -> None:
    cache = JobViewCache(FakePlane(), size=2)  # type: ignore[arg-type]
    records = [record(row(id=i)) for i in (1, 2, 3)]
    views = cache.render(records)
    assert sorted(cache._entries) == [2, 3]
    assert cache.render(records[2:])[0] is views[2]
    assert list_body(views[:1], "1").startswith(b'{"items":[{"id":1,')
    assert json.loads(list_body([], None)) == {"items": [], "continue": None}
