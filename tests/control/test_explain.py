"""The explain answer and its plain words, from a real engine, a stored row and its events."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from phalanx.control.job_explanation import explain_answer, explain_text
from phalanx.engine import Engine, EngineConfig, Submit, Upsert
from phalanx.engine.config import BackfillConfig
from phalanx.engine.explain.report import explain_job
from phalanx.model import Job, PodSet
from phalanx.store.records import JobEventRow, JobRow
from tests.engine.helpers import cluster_queue, engine_with, flavor, job, node, step

NOW = datetime(2026, 12, 3, 13, 53, tzinfo=UTC).timestamp()


def row(job_id: int, state: str = "PENDING", **fields: Any) -> JobRow:
    values: dict[str, Any] = {
        "id": job_id,
        "name": f"job-{job_id}",
        "tenant": "default",
        "user": "alice",
        "queue": None,
        "cluster_queue": None,
        "priority_class": None,
        "priority": None,
        "state": state,
        "reason": "",
        "message": "",
        "flavor": None,
        "nodes": [],
        "gpus": 8,
        "submission": {},
        "assignment": None,
        "submit_time": NOW - 600,
        "start_time": None,
        "end_time": None,
        "exit_code": None,
        "signal": None,
        "cancel_requested": False,
        "attempt": 0,
    }
    values.update(fields)
    return JobRow(**values)


def event(kind: str, t: float, reason: str = "", message: str = "", **data: Any) -> JobEventRow:
    return JobEventRow(0, 0, t, kind, reason, message, data)


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_quota_shortage_in_plain_words() -> None:
    engine = engine_with(
        flavor("f"),
        *[node(f"n{i}") for i in range(4)],
        cluster_queue("a", {"f": 8}, cohort="co"),
        cluster_queue("b", {"f": 8}, cohort="co"),
        jobs=(job("b", gpus=6, id=1), job("a", gpus=4, id=2)),
    )
    step(engine, 1.0)
    step(engine, 2.0, Submit(job("a", gpus=8, id=3, submit=2.0, priority=7)))
    answer = explain_answer(row(3), explain_job(engine, 3), None, [], NOW)
    json.dumps(answer)
    assert answer["scheduler"] == "pending"
    assert answer["reason"]["code"] == "InsufficientQuota"
    assert answer["reason"]["slurm"]  # Slurm's word for it, for squeue users
    lines = answer["text"].splitlines()
    assert lines[0] == "Job 3 is pending: first of 1 in ClusterQueue a (1st of 1 in the cluster)."
    assert lines[1] == "Priority 7."
    assert lines[2] == (
        "It needs 8 nvidia.com/gpu in flavor f; ClusterQueue a has 4 free of its nominal 8 "
        "and cohort co lends 2: 2 short."
    )
    assert lines[3] == (
        "No start time can be estimated: the kueue preset plans no start times "
        "(phalanx up --backfill plans them)."
    )


def test_priority_factors_reservations_and_estimate() -> None:
    engine = engine_with(
        flavor("f"),
        node("n0"),
        cluster_queue("a", {"f": 8}),
        jobs=(job("a", gpus=8, id=1), job("a", gpus=8, id=2, priority=3)),
    )
    step(engine, 1.0)
    pending = 1 if engine.jobs[1].admission is None else 2
    answer = explain_answer(row(pending), explain_job(engine, pending), None, [], NOW)
    # The factors, the plan and the reservation as the engine's queries give them.
    answer["priority"] = {
        "total": 1843,
        "factors": {"age": 210, "fairshare": 1500, "jobsize": 133, "nice": -0.0},
    }
    answer["reservation_ahead"] = {
        "job_id": 17,
        "priority": 2100,
        "cluster_queue": "a",
        "start": _stamp(NOW + 720),
        "nodes": ["gpu1", "gpu2", "gpu3", "gpu4"],
        "ahead": True,
    }
    answer["estimated_start"] = _stamp(NOW + 720)
    text = explain_text(answer, NOW)
    assert "Priority 1843 = age 210 + fair-share 1500 + job size 133.\n" in text
    assert "Job 17 (priority 2100) holds a reservation on gpu[1-4] from 14:05 UTC.\n" in text
    assert "Expected to start at 2026-12-03T14:05:00Z (in 12 min).\n" in text
    assert "No start time" not in text


def test_gang_shortage_in_plain_words() -> None:
    engine = engine_with(
        flavor("f"),
        *[node(f"n{i}") for i in range(4)],
        cluster_queue("cq", {"f": 64}),
        jobs=(job("cq", gpus=4, id=1), job("cq", gpus=8, count=4, id=2)),
    )
    step(engine, 1.0)
    text = explain_answer(row(2), explain_job(engine, 2), None, [], NOW)["text"]
    assert (
        "Its quota fits in flavor f, but not its gang: 4 tasks of 8 nvidia.com/gpu must start "
        "together and at most 3 fit on the nodes now (28 nvidia.com/gpu free on 4 of 4 nodes, "
        "3 idle)." in text
    )


def test_an_unknown_reason_is_rendered_from_its_code_message_and_details() -> None:
    engine = engine_with(
        flavor("f"), node("n0"), cluster_queue("a", {"f": 8}), jobs=(job("a", 16, id=1),)
    )
    step(engine, 1.0)
    answer = explain_answer(row(1), explain_job(engine, 1), None, [], NOW)
    answer["reason"] = {
        "code": "QOSMaxGRESPerUser",
        "message": "user alice would use more than the 8 nvidia.com/gpu of QOS normal",
        "details": {"qos": "normal", "limit": 8},
    }
    answer["quota"] = []
    text = explain_text(answer, NOW)
    assert (
        "QOSMaxGRESPerUser: user alice would use more than the 8 nvidia.com/gpu of QOS normal."
        in text
    )
    assert "Details: qos=normal, limit=8." in text


def test_a_preempted_and_requeued_job_says_by_whom() -> None:
    engine = engine_with(flavor("f"), node("n0"), cluster_queue("a", {"f": 8}))
    step(engine, 1.0, Submit(job("a", gpus=8, id=5)))
    events = [
        event("Submitted", NOW - 600),
        event("Admitted", NOW - 500, cluster_queue="a", flavor="f", nodes=["n0"], borrowing=True),
        event(
            "Evicting",
            NOW - 120,
            "Preempted",
            "Preempted to accommodate a workload (job 9)",
            preemptor=9,
            preemption_reason="InCohortReclamation",
        ),
        event("Requeued", NOW - 100, "Preempted"),
        event("Admitted", NOW - 60, cluster_queue="a", flavor="f", nodes=["n0"], borrowing=False),
        event("Started", NOW - 59),
    ]
    answer = explain_answer(
        row(5, "RUNNING", cluster_queue="a", flavor="f", nodes=["n0"], start_time=NOW - 59),
        explain_job(engine, 5),
        None,
        events,
        NOW,
    )
    assert answer["preemptions"] == [
        {
            "time": _stamp(NOW - 120),
            "by": 9,
            "reason": "InCohortReclamation",
            "message": "Preempted to accommodate a workload (job 9)",
        }
    ]
    assert answer["last_admission"]["borrowing"] is False
    lines = answer["text"].splitlines()
    assert lines[0] == ("Job 5 is running in ClusterQueue a on n0 (flavor f), since 13:52 UTC.")
    assert "It was preempted by job 9 at 13:51 UTC (reclamation of lent quota in the cohort)." in (
        lines
    )
    assert "It was requeued once (last at 13:51 UTC: Preempted)." in lines


def test_a_finished_job_says_where_it_ran() -> None:
    events = [
        event("Admitted", NOW - 500, cluster_queue="a", flavor="f", nodes=["n0", "n1"]),
        event("Finished", NOW - 60, "COMPLETED"),
    ]
    finished = row(
        8,
        "COMPLETED",
        cluster_queue="a",
        flavor="f",
        nodes=["n0", "n1"],
        start_time=NOW - 499,
        end_time=NOW - 60,
        exit_code=0,
    )
    answer = explain_answer(finished, None, None, events, NOW)
    assert answer["scheduler"] is None
    assert answer["text"] == (
        "Job 8 ended COMPLETED at 13:52 UTC (exit code 0).\n"
        "It last ran in ClusterQueue a on n[0-1] (flavor f), admitted at 13:44 UTC.\n"
    )


def test_a_held_job() -> None:
    answer = explain_answer(row(4), None, ("JobHeldUser", "held: scontrol release"), [], NOW)
    assert answer["scheduler"] == "held"
    assert answer["reason"]["code"] == "JobHeldUser"
    assert answer["text"] == (
        "Job 4 is pending and not yet eligible to be scheduled (JobHeldUser): "
        "held: scontrol release.\n"
    )


def test_the_backfill_plan_in_plain_words() -> None:
    engine = Engine(EngineConfig(preset="kueue", backfill=BackfillConfig(interval_s=0)))
    for obj in (flavor("f"), *[node(f"n{i}") for i in range(1, 5)], cluster_queue("cq", {"f": 32})):
        engine.apply(Upsert(obj))

    def limited(id: int, nodes: int, limit: float | None, priority: int) -> Job:
        pod_set = PodSet(count=nodes, tasks_per_node=1, requests={"nvidia.com/gpu": 8})
        return Job(
            id=id, cluster_queue="cq", priority=priority, time_limit=limit, pod_sets=[pod_set]
        )

    step(engine, 0.0, Submit(limited(1, 2, 100, 10)), Submit(limited(2, 1, 1000, 10)))
    step(engine, 1.0, Submit(limited(3, 3, None, 5)))
    step(engine, 2.0, Submit(limited(4, 1, 200, 1)))
    now = 2.0
    held = explain_answer(row(3, submit_time=1.0), explain_job(engine, 3), None, [], now)
    assert held["reservation"]["start"] == "1970-01-01T00:02:00Z"
    assert "Nodes n[1-2,4] are reserved for it from 00:02 UTC." in held["text"]
    assert "Expected to start at 1970-01-01T00:02:00Z (in 1 min)." in held["text"]
    behind = explain_answer(row(4, submit_time=2.0), explain_job(engine, 4), None, [], now)
    assert "Job 3 (priority 5) holds a reservation on n[1-2,4] from 00:02 UTC." in behind["text"]
    assert (
        "cq has 0 free of its nominal 32 (8 of it held for reservations): 8 short"
        in (behind["text"])
    )


def test_a_preemptor_waits_for_its_victims() -> None:
    engine = engine_with(
        flavor("f"),
        node("n0"),
        cluster_queue("cq", {"f": 8}, preemption={"withinClusterQueue": "LowerPriority"}),
        jobs=(job("cq", gpus=8, id=1, priority=1),),
    )
    step(engine, 1.0)
    step(engine, 2.0, Submit(job("cq", gpus=8, id=2, priority=10, submit=2.0)))
    answer = explain_answer(row(2), explain_job(engine, 2), None, [], NOW)
    assert answer["reason"]["code"] == "PendingPreemption"
    assert answer["reason"]["details"]["victims"] == [1]
    assert (
        "It has preempted job(s) 1 and starts once they have given back the quota and nodes "
        "it needs." in answer["text"]
    )
    victim = explain_answer(row(1, "RUNNING"), explain_job(engine, 1), None, [], NOW)
    assert victim["admission"]["evicting"] is True
    assert "It is being evicted (Preempted)." in victim["text"]


def test_a_preemptor_and_its_victim_say_what_the_victim_lost() -> None:
    from phalanx.engine import Checkpoint, Evict

    engine = engine_with(
        flavor("f"),
        node("n0"),
        cluster_queue("cq", {"f": 8}, preemption={"withinClusterQueue": "LowerPriority"}),
    )
    step(engine, 0.0, Submit(job("cq", gpus=4, id=1, priority=1)))
    step(engine, 10.0, Submit(job("cq", gpus=4, id=2, priority=1, submit=10.0)))
    # Job 1 checkpointed 6 min before the preemption: it loses 0.4 GPU-h; job 2, 4 GPUs
    # for 1 h, would lose 4 GPU-h.
    engine.apply(Checkpoint(1, 3250.0))
    decisions = step(engine, 3610.0, Submit(job("cq", gpus=4, id=3, priority=10, submit=3600.0)))
    [evict] = [d for d in decisions if isinstance(d, Evict)]
    assert (evict.job_id, evict.lost_gpu_hours, evict.spared) == (1, 0.4, ((2, 4.0),))
    answer = explain_answer(row(3), explain_job(engine, 3), None, [], NOW)
    assert (
        "It preempted job 1 (lost 0.4 GPU-h since its checkpoint) rather than job 2 (4.0 GPU-h)."
        in answer["text"].splitlines()
    )
    events = [
        event("Admitted", NOW - 600, cluster_queue="cq", nodes=["n0"], attempt=1),
        event("Checkpointed", NOW - 360, attempt=1),
        event(
            "Evicting",
            NOW,
            "Preempted",
            evict.message,
            preemptor=3,
            preemption_reason="InClusterQueue",
            lost_gpu_hours=0.4,
            spared=[[2, 4.0]],
        ),
    ]
    victim = explain_answer(row(1, "RUNNING", attempt=1), explain_job(engine, 1), None, events, NOW)
    assert victim["last_checkpoint"] == {"time": _stamp(NOW - 360), "attempt": 1}
    lines = victim["text"].splitlines()
    assert "It last reported a checkpoint at 13:47 UTC." in lines
    assert "It was chosen (lost 0.4 GPU-h since its checkpoint) rather than job 2 (4.0 GPU-h)." in (
        lines
    )
