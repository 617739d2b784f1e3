"""Admission against quota, and the job lifecycle around it (Kueue semantics, §2.1-2.5).

Each scenario builds a small cluster with plenty of node capacity, so only
quota decides: within nominal quota, borrowing from a cohort, borrowingLimit
and lendingLimit, hierarchical cohorts holding quota of their own, queues
without a cohort. Then the lifecycle: one cycle admitting in several queues,
non-borrowing entries before borrowers, Finish / Cancel / Requeue, and usage
returning to zero. The last part covers the queueing strategies: StrictFIFO
blocking behind its head, BestEffortFIFO letting other shapes go ahead, and
parked queues waking on events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from phalanx.engine import Cancel, Finish, ReasonCode, Requeue, Submit, Upsert
from phalanx.model import Job
from tests.engine.helpers import (
    GPU,
    admits,
    admitted_ids,
    cluster_queue,
    cohort,
    engine_with,
    flavor,
    job,
    local_queue,
    node,
    node_gpus_used,
    pendings,
    quota,
    quota_usage,
    step,
)


def _nodes(n: int = 8) -> list[Any]:
    return [node(f"n{i}") for i in range(n)]


# --------------------------------------------------------------------------- quota scenarios


@dataclass
class QuotaCase:
    objects: list[Any]
    jobs: list[Job]
    admitted: list[int]
    """Admitted job ids, in decision order."""
    pending: dict[int, ReasonCode] = field(default_factory=dict)
    borrowing: dict[int, bool] = field(default_factory=dict)
    short_in: dict[int, str] = field(default_factory=dict)
    short_by: dict[int, int] = field(default_factory=dict)


QUOTA_CASES: dict[str, QuotaCase] = {
    "within-nominal": QuotaCase(
        objects=[cluster_queue("cq", {"f": 16})],
        jobs=[job("cq", gpus=8, id=1), job("cq", gpus=8, id=2)],
        admitted=[1, 2],
        borrowing={1: False, 2: False},
    ),
    "over-nominal-without-cohort": QuotaCase(
        objects=[cluster_queue("cq", {"f": 8}), cluster_queue("other", {"f": 64})],
        jobs=[job("cq", gpus=8, id=1), job("cq", gpus=1, id=2)],
        admitted=[1],
        pending={2: ReasonCode.INSUFFICIENT_QUOTA},
        short_in={2: "ClusterQueue/cq"},
        short_by={2: 1},
    ),
    "borrow-from-cohort": QuotaCase(
        objects=[
            cluster_queue("cq1", {"f": 8}, cohort="co"),
            cluster_queue("cq2", {"f": 16}, cohort="co"),
        ],
        jobs=[job("cq1", gpus=8, id=1), job("cq1", gpus=8, id=2), job("cq1", gpus=8, id=3)],
        admitted=[1, 2, 3],
        borrowing={1: False, 2: True, 3: True},
    ),
    "cohort-exhausted": QuotaCase(
        objects=[
            cluster_queue("cq1", {"f": 8}, cohort="co"),
            cluster_queue("cq2", {"f": 8}, cohort="co"),
        ],
        jobs=[job("cq1", gpus=8, id=1), job("cq1", gpus=6, id=2), job("cq1", gpus=4, id=3)],
        admitted=[1, 2],
        pending={3: ReasonCode.INSUFFICIENT_QUOTA},
        short_in={3: "Cohort/co"},
        short_by={3: 2},
    ),
    "borrowing-limit-stops-borrowing": QuotaCase(
        objects=[
            cluster_queue("cq1", {"f": [quota(GPU, 8, borrowing=4)]}, cohort="co"),
            cluster_queue("cq2", {"f": 32}, cohort="co"),
        ],
        jobs=[job("cq1", gpus=8, id=1), job("cq1", gpus=6, id=2), job("cq1", gpus=4, id=3)],
        admitted=[1, 3],
        pending={2: ReasonCode.INSUFFICIENT_QUOTA},
        borrowing={1: False, 3: True},
        short_in={2: "ClusterQueue/cq1"},
        short_by={2: 2},
    ),
    "borrowing-limit-zero": QuotaCase(
        objects=[
            cluster_queue("cq1", {"f": [quota(GPU, 8, borrowing=0)]}, cohort="co"),
            cluster_queue("cq2", {"f": 32}, cohort="co"),
        ],
        jobs=[job("cq1", gpus=8, id=1), job("cq1", gpus=1, id=2)],
        admitted=[1],
        pending={2: ReasonCode.INSUFFICIENT_QUOTA},
        short_in={2: "ClusterQueue/cq1"},
    ),
    "lending-limit-caps-what-borrowers-get": QuotaCase(
        objects=[
            cluster_queue("borrower", {"f": 0}, cohort="co"),
            cluster_queue("lender", {"f": [quota(GPU, 16, lending=4)]}, cohort="co"),
        ],
        jobs=[job("borrower", gpus=4, id=1), job("borrower", gpus=1, id=2)],
        admitted=[1],
        pending={2: ReasonCode.INSUFFICIENT_QUOTA},
        borrowing={1: True},
        short_in={2: "Cohort/co"},
    ),
    "lending-limit-more-than-lendable-ever": QuotaCase(
        objects=[
            cluster_queue("borrower", {"f": 0}, cohort="co"),
            cluster_queue("lender", {"f": [quota(GPU, 16, lending=4)]}, cohort="co"),
        ],
        jobs=[job("borrower", gpus=8, id=1)],
        admitted=[],
        pending={1: ReasonCode.EXCEEDS_MAX_QUOTA},
    ),
    "lending-limit-keeps-private-quota": QuotaCase(
        # The borrower takes all 4 lendable GPUs first; the lender still gets its private 12.
        objects=[
            cluster_queue("borrower", {"f": 0}, cohort="co"),
            cluster_queue("lender", {"f": [quota(GPU, 16, lending=4)]}, cohort="co"),
        ],
        jobs=[job("borrower", gpus=4, id=1), job("lender", gpus=6, count=2, id=2)],
        admitted=[2, 1],
        borrowing={1: True, 2: False},
    ),
    "lender-own-usage-eats-private-part-first": QuotaCase(
        # The lender uses 12 (all private): the 4 lendable GPUs are still there.
        objects=[
            cluster_queue("borrower", {"f": 0}, cohort="co"),
            cluster_queue("lender", {"f": [quota(GPU, 16, lending=4)]}, cohort="co"),
        ],
        jobs=[job("lender", gpus=6, count=2, id=1), job("borrower", gpus=4, id=2)],
        admitted=[1, 2],
    ),
    "hierarchical-cohort-with-own-quota": QuotaCase(
        objects=[
            cohort("root", flavors={"f": 8}),
            cohort("child", parent="root"),
            cluster_queue("cq", {"f": 8}, cohort="child"),
        ],
        jobs=[job("cq", gpus=8, count=2, id=1), job("cq", gpus=1, id=2)],
        admitted=[1],
        pending={2: ReasonCode.INSUFFICIENT_QUOTA},
        borrowing={1: True},
        short_in={2: "Cohort/root"},
        short_by={2: 1},
    ),
    "hierarchical-cohort-quota-exceeded-ever": QuotaCase(
        objects=[
            cohort("root", flavors={"f": 8}),
            cohort("child", parent="root"),
            cluster_queue("cq", {"f": 8}, cohort="child"),
        ],
        jobs=[job("cq", gpus=17, id=1)],
        admitted=[],
        pending={1: ReasonCode.EXCEEDS_MAX_QUOTA},
    ),
    # Kueue "hierarchical cohort respects lending limit when borrowing", in GPUs.
    "hierarchical-lending-limit-respected": QuotaCase(
        objects=[
            cohort("root"),
            cohort("child", parent="root"),
            cluster_queue("lender", {"f": [quota(GPU, 10, lending=3)]}, cohort="child"),
            cluster_queue("borrower", {"f": [quota(GPU, 5, borrowing=10)]}, cohort="child"),
        ],
        jobs=[job("borrower", gpus=5, id=1), job("borrower", gpus=4, id=2)],
        admitted=[1],
        pending={2: ReasonCode.INSUFFICIENT_QUOTA},
        short_by={2: 1},
    ),
    # Kueue "hierarchical cohort allows borrowing up to lending limit", in GPUs.
    "hierarchical-borrow-up-to-lending-limit": QuotaCase(
        objects=[
            cohort("root"),
            cohort("child", parent="root"),
            cluster_queue("lender", {"f": [quota(GPU, 10, lending=5)]}, cohort="child"),
            cluster_queue("borrower", {"f": [quota(GPU, 5, borrowing=10)]}, cohort="child"),
        ],
        jobs=[job("borrower", gpus=5, id=1), job("borrower", gpus=5, id=2)],
        admitted=[1, 2],
        borrowing={1: False, 2: True},
    ),
    "borrow-across-cohort-levels": QuotaCase(
        # cq-a borrows what a sibling cohort's queue lends through the common root.
        objects=[
            cohort("root"),
            cohort("left", parent="root"),
            cohort("right", parent="root"),
            cluster_queue("cq-a", {"f": 8}, cohort="left"),
            cluster_queue("cq-b", {"f": 8}, cohort="right"),
        ],
        jobs=[job("cq-a", gpus=8, count=2, id=1), job("cq-a", gpus=1, id=2)],
        admitted=[1],
        pending={2: ReasonCode.INSUFFICIENT_QUOTA},
        borrowing={1: True},
        short_in={2: "Cohort/root"},
    ),
}


@pytest.mark.parametrize("case", QUOTA_CASES.values(), ids=QUOTA_CASES.keys())
def test_quota_scenarios(case: QuotaCase) -> None:
    engine = engine_with(flavor("f"), *_nodes(), *case.objects, jobs=tuple(case.jobs))
    out = engine.cycle(0.0)
    assert admitted_ids(out) == case.admitted
    reasons = pendings(out)
    assert {j: r.code for j, r in reasons.items()} == case.pending
    adm = admits(out)
    for job_id, borrowing in case.borrowing.items():
        assert adm[job_id].borrowing is borrowing, job_id
    for job_id, where in case.short_in.items():
        assert reasons[job_id].details["shortIn"] == where
    for job_id, short in case.short_by.items():
        assert reasons[job_id].details["shortBy"] == short
    # Every pending job's explanation is the reason it was given.
    for job_id, reason in reasons.items():
        assert engine.explain(job_id) == reason
    assert engine.admitted_count() == len(case.admitted)
    assert engine.pending_count() == len(case.jobs) - len(case.admitted)


# --------------------------------------------------------------------------- one cycle


@pytest.mark.parametrize("with_lender_job", [False, True])
def test_non_borrowing_entries_processed_before_borrowers(with_lender_job: bool) -> None:
    """A high-priority borrower loses to a non-borrowing head of another CQ in the same cycle."""
    jobs = [job("a", gpus=8, id=1, priority=100)]
    if with_lender_job:
        jobs.append(job("b", gpus=8, id=2, priority=0))
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("a", {"f": 0}, cohort="co"),
        cluster_queue("b", {"f": 8}, cohort="co"),
        jobs=tuple(jobs),
    )
    out = engine.cycle(0.0)
    if with_lender_job:
        assert admitted_ids(out) == [2]
        assert admits(out)[2].borrowing is False
        assert pendings(out)[1].code is ReasonCode.INSUFFICIENT_QUOTA
    else:
        assert admitted_ids(out) == [1]
        assert admits(out)[1].borrowing is True


def test_lower_borrowing_height_goes_first() -> None:
    """Kueue: "in a hierarchical cohort, workload borrowing less is scheduled first"."""
    # near borrows from its sibling in cohort "inner" (height 1); far must reach "root" (height 2).
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cohort("root", flavors={"f": 4}),
        cohort("inner", parent="root"),
        cluster_queue("near", {"f": 0}, cohort="inner"),
        cluster_queue("lender", {"f": 4}, cohort="inner"),
        cluster_queue("far", {"f": 0}, cohort="root"),
        jobs=(
            job("far", gpus=4, id=1, priority=100),
            job("near", gpus=4, id=2, priority=0),
        ),
    )
    out = engine.cycle(0.0)
    # Both fit (4 in inner, 4 in root) and both are admitted, the nearer borrower first.
    assert admitted_ids(out) == [2, 1]


def test_several_cluster_queues_admit_in_one_cycle() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq1", {"f": 16}),
        cluster_queue("cq2", {"f": 16}, cohort="co"),
        cluster_queue("cq3", {"f": 16}, cohort="co"),
        jobs=tuple(job(f"cq{i % 3 + 1}", gpus=4, id=i) for i in range(1, 13)),
    )
    out = engine.cycle(0.0)
    assert sorted(admitted_ids(out)) == list(range(1, 13))
    assert {d.cluster_queue for d in admits(out).values()} == {"cq1", "cq2", "cq3"}
    assert engine.pending_count() == 0
    assert engine.cycle(1.0) == []


def test_cohort_not_over_admitted_by_several_borrowers_in_one_cycle() -> None:
    """Kueue "no overadmission while borrowing": later entries see earlier admissions."""
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("lender", {"f": 8}, cohort="co"),
        cluster_queue("b1", {"f": 0}, cohort="co"),
        cluster_queue("b2", {"f": 0}, cohort="co"),
        cluster_queue("b3", {"f": 0}, cohort="co"),
        jobs=(job("b1", gpus=4, id=1), job("b2", gpus=4, id=2), job("b3", gpus=4, id=3)),
    )
    out = engine.cycle(0.0)
    assert admitted_ids(out) == [1, 2]
    assert pendings(out)[3].code is ReasonCode.INSUFFICIENT_QUOTA
    assert quota_usage(engine)["cohort:co"] == {("f", GPU): 8}


# --------------------------------------------------------------------------- lifecycle


def test_finish_releases_quota_and_next_cycle_admits_waiting_job() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        jobs=(job("cq", gpus=8, id=1), job("cq", gpus=8, id=2)),
    )
    assert admitted_ids(engine.cycle(0.0)) == [1]
    assert engine.explain(2) is not None
    # Nothing changed: the parked job is not retried.
    assert engine.cycle(1.0) == []
    out = step(engine, 2.0, Finish(1))
    assert admitted_ids(out) == [2]
    assert engine.explain(2) is None
    assert quota_usage(engine)["cq:cq"] == {("f", GPU): 8}


def test_finish_in_cohort_wakes_borrower_of_another_queue() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq1", {"f": 8}, cohort="co"),
        cluster_queue("cq2", {"f": 8}, cohort="co"),
        jobs=(job("cq2", gpus=8, count=2, id=1),),
    )
    out = engine.cycle(0.0)
    assert admitted_ids(out) == [1]
    assert admits(out)[1].borrowing is True
    # cq1's own nominal quota is lent out: it waits, short in the cohort.
    out = step(engine, 0.5, Submit(job("cq1", gpus=8, id=2)))
    assert pendings(out)[2].details["shortIn"] == "Cohort/co"
    out = step(engine, 1.0, Finish(1))
    assert admitted_ids(out) == [2]
    assert admits(out)[2].borrowing is False


def test_cancel_pending_job() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        jobs=(job("cq", gpus=8, id=1), job("cq", gpus=8, id=2), job("cq", gpus=8, id=3)),
    )
    assert admitted_ids(engine.cycle(0.0)) == [1]
    assert engine.pending_count() == 2
    engine.apply(Cancel(2))
    assert engine.pending_count() == 1
    assert engine.explain(2) is None
    assert 2 not in engine.jobs
    # The cancelled job is never admitted: the next in line is.
    out = step(engine, 1.0, Finish(1))
    assert admitted_ids(out) == [3]
    # Its id can be used again.
    out = step(engine, 2.0, Submit(job("cq", gpus=1, id=2)))
    assert pendings(out)[2].code is ReasonCode.INSUFFICIENT_QUOTA


def test_cancel_of_admitted_job_keeps_its_quota() -> None:
    """Cancel withdraws pending jobs only; an admitted job releases its quota on Finish."""
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        jobs=(job("cq", gpus=8, id=1), job("cq", gpus=8, id=2)),
    )
    engine.cycle(0.0)
    out = step(engine, 1.0, Cancel(1))
    assert admitted_ids(out) == []
    assert engine.admitted_count() == 1
    assert admitted_ids(step(engine, 2.0, Finish(1))) == [2]


def test_cancel_head_of_blocked_strict_fifo_queue_unblocks_it() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}, strategy="StrictFIFO"),
        jobs=(job("cq", gpus=4, id=1), job("cq", gpus=8, id=2), job("cq", gpus=2, id=3)),
    )
    assert admitted_ids(engine.cycle(0.0)) == [1]
    assert engine.explain(3).code is ReasonCode.STRICT_FIFO  # type: ignore[union-attr]
    assert admitted_ids(step(engine, 1.0, Cancel(2))) == [3]


def test_requeue_puts_admitted_job_back_with_same_id() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        jobs=(job("cq", gpus=8, id=7, submit=0.0),),
    )
    assert admitted_ids(engine.cycle(0.0)) == [7]
    engine.apply(Requeue(7))
    assert engine.admitted_count() == 0
    assert engine.pending_count() == 1
    assert 7 in engine.jobs
    assert quota_usage(engine)["cq:cq"] == {}
    assert set(node_gpus_used(engine).values()) == {0}
    out = engine.cycle(1.0)
    assert admitted_ids(out) == [7]
    assert engine.admitted_count() == 1


def test_requeued_job_competes_by_its_original_submit_time() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        jobs=(job("cq", gpus=8, id=1, submit=0.0),),
    )
    engine.cycle(0.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, submit=5.0)))
    assert pendings(engine.cycle(5.0))[2].code is ReasonCode.INSUFFICIENT_QUOTA
    engine.apply(Requeue(1))
    out = engine.cycle(6.0)
    # Job 1 was submitted first: it gets the freed quota back, job 2 keeps waiting.
    assert admitted_ids(out) == [1]


def test_requeue_frees_quota_for_another_job_first() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        jobs=(job("cq", gpus=8, id=1, submit=10.0),),
    )
    engine.cycle(10.0)
    engine.apply(Submit(job("cq", gpus=8, id=2, submit=1.0, priority=5)))
    assert admitted_ids(engine.cycle(11.0)) == []
    engine.apply(Requeue(1))
    out = engine.cycle(12.0)
    assert admitted_ids(out) == [2]
    assert pendings(out)[1].code is ReasonCode.INSUFFICIENT_QUOTA


def test_requeue_and_finish_of_unknown_or_pending_jobs_are_ignored() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        jobs=(job("cq", gpus=8, id=1), job("cq", gpus=8, id=2)),
    )
    engine.cycle(0.0)
    engine.apply(Requeue(2))  # pending: nothing to requeue
    engine.apply(Requeue(99))
    engine.apply(Finish(99))
    engine.apply(Cancel(99))
    assert engine.admitted_count() == 1
    assert engine.pending_count() == 1
    assert engine.cycle(1.0) == []


def test_submitting_an_id_twice_is_rejected() -> None:
    engine = engine_with(flavor("f"), *_nodes(), cluster_queue("cq", {"f": 8}))
    engine.apply(Submit(job("cq", id=1)))
    with pytest.raises(ValueError, match="already submitted"):
        engine.apply(Submit(job("cq", id=1)))


def test_usage_returns_to_zero_after_all_finish() -> None:
    objects = [
        flavor("f"),
        *_nodes(),
        cohort("root", flavors={"f": 8}),
        cohort("child", parent="root"),
        cluster_queue("lender", {"f": [quota(GPU, 16, lending=8)]}, cohort="child"),
        cluster_queue("borrower", {"f": [quota(GPU, 8, borrowing=16)]}, cohort="child"),
        cluster_queue("solo", {"f": 16}),
    ]
    jobs = [
        job("borrower", gpus=8, count=2, id=1),
        job("borrower", gpus=4, count=2, id=2),
        job("lender", gpus=2, count=3, id=3),
        job("lender", gpus=8, id=4),
        job("solo", gpus=1, count=5, id=5),
        job("solo", gpus=8, id=6),
    ]
    engine = engine_with(*objects, jobs=tuple(jobs))
    admitted: set[int] = set()
    now = 0.0
    for _ in range(20):
        out = engine.cycle(now)
        admitted.update(admitted_ids(out))
        running = [j for j in engine.jobs if engine.jobs[j].admission is not None]
        if not running:
            break
        now += 1.0
        engine.apply(Finish(running[0]))
    assert admitted == {1, 2, 3, 4, 5, 6}
    assert engine.admitted_count() == 0
    assert engine.pending_count() == 0
    assert all(not usage for usage in quota_usage(engine).values())
    assert set(node_gpus_used(engine).values()) == {0}
    assert all(not slot.used for slot in engine.cache.nodes.values())
    assert {str(engine.node_state(n)) for n in engine.cache.nodes} == {"idle"}


# --------------------------------------------------------------------------- strategies


def _strategy_engine(strategy: str) -> Any:
    # Job 1 takes 4 of 8; job 2 (8) cannot fit; job 3 (2) could.
    return engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}, strategy=strategy),
        jobs=(
            job("cq", gpus=4, id=1, submit=0.0),
            job("cq", gpus=8, id=2, submit=1.0),
            job("cq", gpus=2, id=3, submit=2.0),
            job("cq", gpus=1, id=4, submit=3.0),
        ),
    )


def test_strict_fifo_head_blocks_smaller_jobs_behind_it() -> None:
    engine = _strategy_engine("StrictFIFO")
    out = engine.cycle(0.0)
    assert admitted_ids(out) == [1]
    assert pendings(out)[2].code is ReasonCode.INSUFFICIENT_QUOTA
    for behind in (3, 4):
        reason = engine.explain(behind)
        assert reason is not None
        assert reason.code is ReasonCode.STRICT_FIFO
        assert reason.details["blockedBy"] == 2
        assert reason.details["clusterQueue"] == "cq"
        assert "job 2" in reason.message and "StrictFIFO" in reason.message
    # The head itself explains its own failure.
    assert engine.explain(2) == pendings(out)[2]


def test_best_effort_fifo_lets_smaller_jobs_go_ahead() -> None:
    engine = _strategy_engine("BestEffortFIFO")
    out = engine.cycle(0.0)
    assert admitted_ids(out) == [1, 3, 4]
    assert pendings(out)[2].code is ReasonCode.INSUFFICIENT_QUOTA


def test_strict_fifo_considers_newly_submitted_higher_priority_job() -> None:
    engine = _strategy_engine("StrictFIFO")
    engine.cycle(0.0)
    # Lower priority than the head (same priority, later): not considered.
    assert admitted_ids(step(engine, 1.0, Submit(job("cq", gpus=1, id=5, submit=9.0)))) == []
    assert engine.explain(5).details["blockedBy"] == 2  # type: ignore[union-attr]
    # Higher priority: sorts before the blocked head, so it is considered and fits.
    out = step(engine, 2.0, Submit(job("cq", gpus=2, id=6, submit=9.0, priority=10)))
    assert admitted_ids(out) == [6]
    # The queue is blocked by job 2 again afterwards.
    assert engine.explain(3).details["blockedBy"] == 2  # type: ignore[union-attr]


def test_strict_fifo_new_higher_priority_head_that_does_not_fit_blocks_instead() -> None:
    engine = _strategy_engine("StrictFIFO")
    engine.cycle(0.0)
    out = step(engine, 1.0, Submit(job("cq", gpus=6, id=6, submit=9.0, priority=10)))
    assert admitted_ids(out) == []
    assert pendings(out)[6].code is ReasonCode.INSUFFICIENT_QUOTA
    assert engine.explain(2).details["blockedBy"] == 6  # type: ignore[union-attr]
    assert engine.explain(3).details["blockedBy"] == 6  # type: ignore[union-attr]


@pytest.mark.parametrize("strategy", ["StrictFIFO", "BestEffortFIFO"])
def test_parked_queue_wakes_on_finish(strategy: str) -> None:
    engine = _strategy_engine(strategy)
    first = admitted_ids(engine.cycle(0.0))
    assert engine.cycle(1.0) == []
    # Free everything: job 2 (8 GPUs) now fits, alone.
    for job_id in first:
        engine.apply(Finish(job_id))
    out = engine.cycle(2.0)
    if strategy == "StrictFIFO":
        assert admitted_ids(out) == [2]
        assert pendings(out)[3].code is ReasonCode.INSUFFICIENT_QUOTA
        assert engine.explain(4).details["blockedBy"] == 3  # type: ignore[union-attr]
    else:
        assert admitted_ids(out) == [2]


def test_strict_fifo_queue_does_not_block_other_queues_in_cohort() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("strict", {"f": 8}, cohort="co", strategy="StrictFIFO"),
        cluster_queue("other", {"f": 8}, cohort="co"),
        jobs=(job("strict", gpus=8, count=3, id=1), job("other", gpus=8, id=2)),
    )
    out = engine.cycle(0.0)
    assert admitted_ids(out) == [2]
    assert pendings(out)[1].code is ReasonCode.EXCEEDS_MAX_QUOTA


def test_best_effort_fifo_parks_the_whole_shape() -> None:
    """Jobs of the head's shape wait with the head's reason; other shapes still go."""
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        jobs=(
            job("cq", gpus=6, id=1),
            job("cq", gpus=4, id=2),
            job("cq", gpus=4, id=3),
            job("cq", gpus=2, id=4),
        ),
    )
    out = engine.cycle(0.0)
    assert admitted_ids(out) == [1, 4]
    assert set(pendings(out)) == {2}
    assert engine.explain(3) == pendings(out)[2]


@pytest.mark.parametrize("strategy", ["StrictFIFO", "BestEffortFIFO"])
def test_cancelled_id_resubmitted_with_same_key_among_equal_jobs(strategy: str) -> None:
    """A job re-entering a queue with the key it had before (stale heap entries
    share it) is queued normally: the heaps never compare two queue entries' objects."""
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}, strategy=strategy),
        jobs=tuple(job("cq", gpus=8, id=i, submit=0.0) for i in range(1, 6)),
    )
    assert admitted_ids(engine.cycle(0.0)) == [1]
    for _ in range(3):
        engine.apply(Cancel(2))
        engine.apply(Submit(job("cq", gpus=8, id=2, submit=0.0)))
        engine.apply(Requeue(1))
        out = engine.cycle(1.0)
        assert admitted_ids(out) == [1]
    assert admitted_ids(step(engine, 2.0, Finish(1))) == [2]
    assert admitted_ids(step(engine, 3.0, Finish(2))) == [3]


def test_requeued_job_keeps_queue_order_among_equal_jobs() -> None:
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 16}),
        jobs=tuple(job("cq", gpus=8, id=i, submit=0.0) for i in range(1, 5)),
    )
    assert admitted_ids(engine.cycle(0.0)) == [1, 2]
    order: list[int] = []
    for t in range(1, 6):
        engine.apply(Requeue(1))
        engine.apply(Requeue(2))
        out = engine.cycle(float(t))
        order = admitted_ids(out)
        assert order == [1, 2]
    assert engine.pending_count() == 2


def test_reapplying_a_local_queue_keeps_its_pending_jobs_queued() -> None:
    """Re-upserting a LocalQueue moves its jobs out of and back into their ClusterQueue;
    the queue's heaps hold stale entries with the same keys and must cope with that."""
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        local_queue("lq", "cq", namespace="team"),
        jobs=(
            job("cq", gpus=8, id=1),
            *(
                job(queue="lq", tenant="team", gpus=g, count=c, id=10 + i)
                for i, (g, c) in enumerate([(8, 1), (4, 1), (2, 3), (1, 5), (4, 2)])
            ),
        ),
    )
    assert admitted_ids(engine.cycle(0.0)) == [1]
    for t in range(1, 4):
        engine.apply(Upsert(local_queue("lq", "cq", namespace="team")))
        assert admitted_ids(engine.cycle(float(t))) == []
        assert engine.pending_count() == 5
    assert admitted_ids(step(engine, 5.0, Finish(1))) == [10]


def test_local_queue_reapplied_before_first_cycle() -> None:
    """A job re-entering its ClusterQueue before any cycle leaves a stale heap entry with
    its own key behind; queueing it again must not compare the two entries' queues."""
    engine = engine_with(
        flavor("f"),
        *_nodes(),
        cluster_queue("cq", {"f": 8}),
        local_queue("lq", "cq", namespace="team"),
        jobs=(job(queue="lq", tenant="team", gpus=8, id=1),),
    )
    engine.apply(Upsert(local_queue("lq", "cq", namespace="team")))
    engine.apply(Upsert(local_queue("lq", "cq", namespace="team")))
    assert admitted_ids(engine.cycle(0.0)) == [1]


def test_a_job_requesting_nothing_is_placed_on_the_first_flavors_nodes() -> None:
    # Kueue admits a workload without requests; it charges no quota but its
    # tasks still need nodes, taken from the ClusterQueue's first flavor.
    engine = engine_with(
        flavor("a", pool="a"),
        flavor("b", pool="b"),
        node("na", pool="a"),
        node("nb", pool="b"),
        cluster_queue("cq", {"a": 0, "b": 8}),
    )
    engine.apply(Submit(job("cq", gpus=0, count=3, id=1)))
    out = engine.cycle(0.0)
    [admit] = admits(out).values()
    assert [(n.node, n.count) for n in admit.pod_sets[0].nodes] == [("na", 3)]
    assert not any(quota_usage(engine).get("cq", {}).values())
