"""The dashboard's queries: sorted, searched and counted job pages, GPU spans, starts
since a time and pending jobs per LocalQueue, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from phalanx.store import NewJob, Store
from phalanx.store.store import job_from_record


@pytest.fixture
def filled(store: Store, new_job: Callable[..., NewJob]) -> Store:
    with store.begin() as tx:
        tx.insert_jobs(
            [
                new_job(
                    i,
                    gpus=(4, 1, 8, 2)[i % 4],
                    tenant=("team-a", "team-b")[i % 2],
                    name=("train_%d" if i % 3 else "eval-%d") % i,
                )
                for i in range(12)
            ]
        )
        tx.update_job(1, state="RUNNING", start_time=2000.0)
        tx.update_job(2, state="COMPLETED", start_time=1500.0, end_time=1800.0)
        tx.update_job(3, state="RUNNING", start_time=2500.0)
    return store


def test_pages_sort_by_a_column_with_ties_by_id(filled: Store) -> None:
    by_gpus = filled.list_jobs(sort="gpus", descending=True, limit=4)
    assert [(j.gpus, j.id) for j in by_gpus] == [(8, 11), (8, 7), (8, 3), (4, 9)]
    second = filled.list_jobs(sort="gpus", descending=True, offset=4, limit=4)
    assert [(j.gpus, j.id) for j in second] == [(4, 5), (4, 1), (2, 12), (2, 8)]
    with pytest.raises(ValueError, match="sort by one of"):
        filled.list_jobs(sort="gpus; drop table jobs")


def test_search_matches_an_id_or_part_of_a_name_literally(filled: Store) -> None:
    # Job 7 by its id, job 8 by its name (train_7: names count from 0).
    assert [j.id for j in filled.list_jobs(search="7")] == [7, 8]
    assert {j.name for j in filled.list_jobs(search="eval")} == {
        "eval-0",
        "eval-3",
        "eval-6",
        "eval-9",
    }
    # "_" and "%" are characters, not wildcards.
    assert filled.count_matching(search="n_") == 8
    assert filled.count_matching(search="%") == 0
    assert filled.count_matching(tenants=["team-b"], search="train") == 4


def test_counts_spans_starts_and_pending_per_queue(filled: Store) -> None:
    assert filled.count_matching() == 12
    assert filled.count_matching(states=["RUNNING"]) == 2
    spans = sorted(filled.gpu_spans(since=1900.0))
    assert spans == [(2000.0, None, 4), (2500.0, None, 8)]
    assert filled.started_since(2000.0) == 2
    assert filled.started_since(2000.0, tenants=["team-b"]) == 0
    assert filled.pending_by_queue() == {"team-a/default": 4, "team-b/default": 5}


# -- records: the API's list pages ----------------------------------------------------

PAGE_FILTERS: list[dict[str, object]] = [
    {},
    {"descending": True},
    {"states": ["RUNNING"]},
    {"after_id": 2, "limit": 2},
    {"descending": True, "after_id": 5, "limit": 3},
    {"tenants": ["team-b"], "limit": 1},
]


def _stored(store: Store, new_job: Callable[..., NewJob], times: list[float]) -> None:
    submission = {"script": 'echo "é\\n"\t', "big": 2**70, "x": [1.5, None], "e": {}}
    with store.begin() as tx:
        ids = tx.insert_jobs(
            [new_job(i, submit_time=t, submission=submission) for i, t in enumerate(times)]
        )
        tx.update_job(
            ids[1],
            state="RUNNING",
            start_time=1796475927.0000001,
            nodes=["n1", "n2"],
            assignment={"gpus": {"n1": [0, 1]}},
            cancel_requested=True,
        )
        tx.update_job(ids[2], hold=True, end_time=1e9 + 1e-6, exit_code=-9, tenant="team-b")


def test_job_records_are_the_stored_rows_to_the_last_bit(
    store: Store, new_job: Callable[..., NewJob]
) -> None:
    # On SQLite a page comes as one JSON row; REALs must survive it exactly.
    times = [1796475926.2622733, 1764940000.9995, 1.0, 2.5, 12345.678901234567, 2.0**61]
    _stored(store, new_job, times)
    for filters in PAGE_FILTERS:
        records = store.list_job_records(**filters)
        assert [job_from_record(r) for r in records] == store.list_jobs(**filters), filters
    record = store.list_job_records(ids=[2])[0]
    assert isinstance(record[14], str)  # the submission, as stored
    assert record[16] == times[1] and record[21] is True  # submit_time, cancel_requested
    assert [r[16] for r in store.list_job_records()] == times


def test_job_records_outside_the_exact_range_are_read_row_by_row(
    store: Store, new_job: Callable[..., NewJob]
) -> None:
    times = [0.0, 0.1, -3.5, 1e300, 5e-324, 1796475926.2622733]
    _stored(store, new_job, times)
    for filters in PAGE_FILTERS:
        records = store.list_job_records(**filters)
        assert [job_from_record(r) for r in records] == store.list_jobs(**filters), filters
    assert [r[16] for r in store.list_job_records()] == times


def test_job_records_of_no_jobs(store: Store) -> None:
    assert store.list_job_records() == []
    assert store.list_job_records(states=["RUNNING"], limit=5) == []
