"""The durable store on SQLite and PostgreSQL: round trips, transactions, concurrency."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from phalanx.store import (
    JobRow,
    NewJob,
    Store,
)
from phalanx.store.schema import metadata
from phalanx.store.store import MIGRATIONS_DIR, _alembic_config, head_revision

MakeJob = Callable[..., NewJob]


def _insert(store: Store, jobs: list[NewJob]) -> list[int]:
    with store.begin() as tx:
        return tx.insert_jobs(jobs)


# -- opening, migrations -------------------------------------------------------------


def test_open_default_url_creates_state_dir_and_sqlite_db(tmp_path: Path) -> None:
    state = tmp_path / "a" / "b"
    store = Store.open(state_dir=state)
    try:
        assert store.url == f"sqlite:///{state / 'phalanx.db'}"
        assert store.dialect == "sqlite"
        assert (state / "phalanx.db").exists()
    finally:
        store.close()


def test_sqlite_pragmas(tmp_path: Path) -> None:
    store = Store.open(state_dir=tmp_path)
    try:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        store.close()


def test_unsupported_urls(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Store.open("mysql://x@localhost/db", state_dir=tmp_path)
    with pytest.raises(ValueError):
        Store.open("sqlite://", state_dir=tmp_path)
    with pytest.raises(ValueError):
        Store.open("postgresql+psycopg2://x@localhost/db", state_dir=tmp_path)


def test_migrations_ship_inside_the_package() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0001_initial.py").is_file()
    assert head_revision() == "0005"


def test_migrated_schema_matches_metadata(store: Store) -> None:
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, metadata)
        assert diff == []
        assert context.get_current_revision() == head_revision()
        assert set(inspect(conn).get_table_names()) == {
            "alembic_version",
            "jobs",
            "job_charges",
            "leader_lease",
            "job_events",
            "object_meta",
            "objects",
            "revisions",
            "tombstones",
            "tokens",
            "usage",
        }


def test_downgrade_and_upgrade_again(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url, state_dir=tmp_path)
    try:
        for target, tables in (("base", set()), ("head", set(metadata.tables))):
            with store.engine.connect() as conn:
                conn.execution_options(phalanx_write=True)
                with conn.begin():
                    getattr(command, "downgrade" if target == "base" else "upgrade")(
                        _alembic_config(conn), target
                    )
            with store.engine.connect() as conn:
                assert set(inspect(conn).get_table_names()) - {"alembic_version"} == tables
        with store.engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, metadata) == []
    finally:
        store.close()


def test_reopen_keeps_data_and_does_not_remigrate(
    db_url: str, tmp_path: Path, new_job: MakeJob
) -> None:
    store = Store.open(db_url, state_dir=tmp_path)
    ids = _insert(store, [new_job(i) for i in range(3)])
    with store.begin() as tx:
        tx.put_object("Flavor", "a100", {"gpus": 8})
    store.close()

    again = Store.open(db_url, state_dir=tmp_path)
    try:
        assert [j.id for j in again.list_jobs()] == ids
        assert again.get_object("Flavor", "a100") is not None
        assert len(again.job_events(ids[0])) == 1
        with again.engine.connect() as conn:
            versions = conn.execute(text("SELECT version_num FROM alembic_version")).all()
        assert [v[0] for v in versions] == [head_revision()]
        # ids continue after the existing ones
        assert _insert(again, [new_job(9)])[0] > max(ids)
    finally:
        again.close()


def test_closed_store_refuses(tmp_path: Path) -> None:
    store = Store.open(state_dir=tmp_path)
    store.close()
    store.close()  # idempotent
    with pytest.raises(RuntimeError):
        store.get_job(1)
    with pytest.raises(RuntimeError), store.begin():
        pass


# -- jobs ----------------------------------------------------------------------------


def test_insert_and_get_job_round_trip(store: Store, new_job: MakeJob) -> None:
    job = new_job(
        1,
        priority_class="high",
        priority=100,
        gpus=16,
        queue=None,
        cluster_queue=None,
        submission={"nested": {"list": [1, 2.5, "x", None]}, "unicode": "ü✓"},
    )
    (job_id,) = _insert(store, [job])
    row = store.get_job(job_id)
    assert row == JobRow(
        id=job_id,
        name="job-1",
        tenant="team-a",
        user="alice",
        queue=None,
        cluster_queue=None,
        priority_class="high",
        priority=100,
        state="PENDING",
        reason="",
        message="",
        flavor=None,
        nodes=[],
        gpus=16,
        submission={"nested": {"list": [1, 2.5, "x", None]}, "unicode": "ü✓"},
        assignment=None,
        submit_time=1001.0,
        start_time=None,
        end_time=None,
        exit_code=None,
        signal=None,
        cancel_requested=False,
        attempt=0,
    )
    assert isinstance(row.cancel_requested, bool)
    assert store.get_job(job_id + 1000) is None


def test_insert_jobs_returns_ids_in_order_and_increasing(store: Store, new_job: MakeJob) -> None:
    assert _insert(store, []) == []
    first = _insert(store, [new_job(i) for i in range(2500)])
    assert len(set(first)) == 2500
    assert first == sorted(first)
    by_id = {j.id: j for j in store.list_jobs()}
    for i, job_id in enumerate(first):
        assert by_id[job_id].name == f"job-{i}"
    second = _insert(store, [new_job(i) for i in range(5)])
    assert min(second) > max(first)
    assert store.max_job_id() == max(second)


def test_a_heterogeneous_job_reserves_its_components_ids(store: Store, new_job: MakeJob) -> None:
    """A job with ``id_span`` N takes the N-1 ids after its own (Slurm's component ids):
    no later job gets them, in the same batch or a later one."""
    het = dataclasses.replace(new_job(0), id_span=3)
    (first,) = _insert(store, [het])
    (after,) = _insert(store, [new_job(1)])
    assert after == first + 3
    ids = _insert(store, [new_job(2), dataclasses.replace(new_job(3), id_span=2), new_job(4)])
    assert ids == [after + 1, after + 2, after + 4]
    (last,) = _insert(store, [dataclasses.replace(new_job(5), id_span=2)])
    assert _insert(store, [new_job(6)]) == [last + 2]
    assert {j.id for j in store.list_jobs()} == {first, after, *ids, last, last + 2}


def test_insert_jobs_adds_submitted_events(store: Store, new_job: MakeJob) -> None:
    ids = _insert(store, [new_job(i) for i in range(3)])
    for i, job_id in enumerate(ids):
        (event,) = store.job_events(job_id)
        assert event.kind == "Submitted"
        assert event.job_id == job_id
        assert event.time == 1000.0 + i
        assert event.data == {}


def test_recent_events_reads_back_only_the_window(store: Store, new_job: MakeJob) -> None:
    (job_id,) = _insert(store, [new_job()])
    with store.begin() as tx:
        # More than one batch of old events, then a few recent ones of mixed kinds.
        tx.add_events([(job_id, "Requeued", 10.0 + i, "", "", {}) for i in range(2500)])
        tx.add_event(job_id, "Finished", 5000.0, "NODE_FAIL", data={"attempt": 3})
        tx.add_event(job_id, "Started", 5001.0)
        tx.add_event(job_id, "Requeued", 5002.0, "NodeFail")
    recent = store.recent_events(("Requeued", "Finished"), 4000.0)
    assert [(e.kind, e.time) for e in recent] == [("Finished", 5000.0), ("Requeued", 5002.0)]
    assert recent[0].data == {"attempt": 3}
    assert len(store.recent_events(("Requeued",), 0.0)) == 2501
    assert store.recent_events(("Requeued",), 6000.0) == []


def test_insert_10k_jobs_in_one_transaction(store: Store, new_job: MakeJob) -> None:
    # How fast is measured in bench/; here: the bulk path keeps ids and order.
    jobs = [new_job(i) for i in range(10_000)]
    ids = _insert(store, jobs)
    assert len(ids) == 10_000 and ids == sorted(ids) and len(set(ids)) == 10_000
    rows = store.list_jobs(limit=1000)
    assert [r.id for r in rows] == ids[:1000]
    assert [r.name for r in rows] == [j.name for j in jobs[:1000]]


def test_sqlite_readers_do_not_block_on_writer(tmp_path: Path, new_job: MakeJob) -> None:
    store = Store.open(state_dir=tmp_path)
    try:
        (job_id,) = _insert(store, [new_job()])
        with store.begin() as tx:
            tx.update_job(job_id, state="RUNNING")
            row = store.get_job(job_id)  # WAL: a reader sees the last commit, not blocked
            assert row is not None and row.state == "PENDING"
        row = store.get_job(job_id)
        assert row is not None and row.state == "RUNNING"
    finally:
        store.close()


def test_sqlite_file_is_shared_between_stores(tmp_path: Path, new_job: MakeJob) -> None:
    one = Store.open(state_dir=tmp_path)
    two = Store.open(state_dir=tmp_path)
    try:
        ids = _insert(one, [new_job(0)])
        ids += _insert(two, [new_job(1)])
        assert [r.id for r in one.list_jobs()] == ids == sorted(ids)
        engine = create_engine(f"sqlite:///{tmp_path / 'phalanx.db'}")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM jobs")).scalar() == 2
        engine.dispose()
    finally:
        one.close()
        two.close()


def test_job_arrays_get_their_first_tasks_id(store: Store, new_job: Any) -> None:
    with store.begin() as tx:
        ids = tx.insert_jobs(
            [new_job(0)]
            + [
                dataclasses.replace(new_job(i), array_task_id=t, array_start=t == 0)
                for i, t in enumerate([0, 1, 2])
            ]
            + [dataclasses.replace(new_job(9), array_task_id=5, array_start=True, hold=True)]
        )
    rows = {r.id: r for r in store.list_jobs()}
    assert rows[ids[0]].array_job_id is None and rows[ids[0]].array_task_id is None
    assert [rows[i].array_job_id for i in ids[1:4]] == [ids[1]] * 3
    assert [rows[i].array_task_id for i in ids[1:4]] == [0, 1, 2]
    assert rows[ids[4]].array_job_id == ids[4] and rows[ids[4]].hold
    assert [r.id for r in store.list_jobs(array_job_id=ids[1])] == ids[1:4]
    assert [r.id for r in store.list_jobs(names=["job-9"])] == [ids[4]]
