"""Partial admission: a pod set with minCount is admitted with the most tasks that fit."""

from __future__ import annotations

import pytest

from phalanx.engine import (
    Adopt,
    Engine,
    EngineConfig,
    Finish,
    Submit,
    Upsert,
    export_state,
    load_state,
)
from phalanx.model import Job, PodSet
from tests.engine.helpers import GPU, admits, cluster_queue, flavor, node, quota_usage


def _engine(gpus: int = 8) -> Engine:
    engine = Engine(EngineConfig.for_preset("kueue"))
    for obj in (
        node("n0", gpus=8),
        node("n1", gpus=8),
        flavor("f"),
        cluster_queue("cq", {"f": gpus}),
    ):
        engine.apply(Upsert(obj))
    return engine


def _job(id: int, count: int, min_count: int | None, gpus: int = 1, **extra: object) -> Job:
    return Job(
        id=id,
        cluster_queue="cq",
        pod_sets=[PodSet(count=count, min_count=min_count, requests={GPU: gpus}, **extra)],
    )


def test_largest_count_that_fits_is_admitted() -> None:
    engine = _engine(gpus=6)
    engine.apply(Submit(_job(1, count=10, min_count=2)))
    admit = admits(engine.cycle(1.0))[1]
    assert admit.pod_sets[0].count == 6
    assert sum(n.count for n in admit.pod_sets[0].nodes) == 6
    assert quota_usage(engine)["cq:cq"] == {("f", GPU): 6}
    assert admit.to_dict()["pod_sets"][0]["count"] == 6  # type: ignore[index]


def test_below_min_count_waits_for_what_the_minimum_needs() -> None:
    engine = _engine(gpus=6)
    engine.apply(Submit(_job(1, count=4, min_count=None)))
    engine.cycle(0.0)
    engine.apply(Submit(_job(2, count=10, min_count=4)))
    assert not admits(engine.cycle(1.0))
    reason = engine.explain(2)
    assert reason is not None and reason.code == "InsufficientQuota"
    assert reason.details["shortBy"] == 2  # the minimum (4) against the 2 left
    engine.apply(Finish(1))
    assert admits(engine.cycle(2.0))[2].pod_sets[0].count == 6


def test_exceeding_max_quota_even_at_min_count() -> None:
    engine = _engine(gpus=3)
    engine.apply(Submit(_job(1, count=10, min_count=4)))
    assert not admits(engine.cycle(1.0))
    reason = engine.explain(1)
    assert reason is not None and reason.code == "ExceedsMaxQuota"


def test_full_count_preferred_when_it_fits() -> None:
    engine = _engine(gpus=16)
    engine.apply(Submit(_job(1, count=10, min_count=2)))
    assert admits(engine.cycle(1.0))[1].pod_sets[0].count == 10


def test_partial_counts_respect_tasks_per_node_and_nodes() -> None:
    # Quota is ample; nodes hold 2 x 8 GPUs; groups of 2 tasks of 4 GPUs per node.
    engine = _engine(gpus=64)
    engine.apply(Submit(_job(1, count=8, min_count=2, gpus=4, tasks_per_node=2)))
    admit = admits(engine.cycle(1.0))[1]
    assert admit.pod_sets[0].count == 4
    assert sorted(n.count for n in admit.pod_sets[0].nodes) == [2, 2]


def test_partial_admission_releases_what_it_took_and_survives_adopt() -> None:
    engine = _engine(gpus=6)
    engine.apply(Submit(_job(1, count=10, min_count=2)))
    admit = admits(engine.cycle(1.0))[1]
    other = Engine(EngineConfig.for_preset("kueue"))
    for obj in (node("n0", gpus=8), node("n1", gpus=8), flavor("f"), cluster_queue("cq", {"f": 6})):
        other.apply(Upsert(obj))
    other.apply(Adopt(_job(1, count=10, min_count=2), admit))
    assert quota_usage(other)["cq:cq"] == {("f", GPU): 6}
    loaded = load_state(export_state(engine))
    assert quota_usage(loaded)["cq:cq"] == {("f", GPU): 6}
    engine.apply(Finish(1))
    assert quota_usage(engine)["cq:cq"] == {}


def test_min_count_above_count_is_rejected() -> None:
    with pytest.raises(ValueError, match="minCount"):
        PodSet(count=2, min_count=3)
