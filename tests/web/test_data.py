"""The dashboard's page data: the utilisation sparkline, lending, the cohort tree."""

from __future__ import annotations

import pytest

from phalanx.web import data


def test_sparkline_is_the_mean_share_of_gpus_per_five_minutes() -> None:
    now = 10_000.0
    start = now - data.SPARK_BUCKETS * data.SPARK_BUCKET_S
    spans = [
        (start - 50, start + 150, 8),  # half of the first bucket
        (now - 300, None, 4),  # the whole last bucket, still running
        (start + 600, start + 900, 16),  # exactly the third bucket
    ]
    spark = data.sparkline(spans, total_gpus=16, now=now)
    assert len(spark) == data.SPARK_BUCKETS
    assert spark[0] == pytest.approx(0.25)
    assert spark[1] == 0.0
    assert spark[2] == pytest.approx(1.0)
    assert spark[-1] == pytest.approx(0.25)
    assert data.sparkline(spans, total_gpus=0, now=now) == [0.0] * data.SPARK_BUCKETS


def _bar(nominal: int, used: int, borrowed: int = 0) -> dict[str, object]:
    return {
        "flavor": "h100",
        "resource": "nvidia.com/gpu",
        "nominal": nominal,
        "used": used,
        "borrowed": borrowed,
        "lent": 0,
    }


def test_the_cohorts_borrowing_is_lent_by_the_queues_with_room() -> None:
    queues = [
        {"name": "a", "cohort": "c", "bars": [_bar(16, 28, borrowed=12)]},
        {"name": "b", "cohort": "c", "bars": [_bar(16, 0)]},
        {"name": "d", "cohort": "c", "bars": [_bar(8, 0)]},
        {"name": "alone", "cohort": None, "bars": [_bar(8, 0)]},
    ]
    data._attribute_lending(queues)
    assert [q["bars"][0]["lent"] for q in queues] == [0, 8, 4, 0]


def test_cohorts_nest_and_queues_without_one_come_last() -> None:
    parents = {"root": None, "research": "root", "prod": "root", "": None}
    queues = [
        {"name": "a", "cohort": "research"},
        {"name": "b", "cohort": "prod"},
        {"name": "x", "cohort": None},
    ]
    tree = data._cohort_tree(parents, queues)
    assert [n["name"] for n in tree] == ["root", ""]
    assert [c["name"] for c in tree[0]["children"]] == ["prod", "research"]
    assert [q["name"] for q in tree[1]["queues"]] == ["x"]
