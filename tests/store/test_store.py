"""The durable store on SQLite and PostgreSQL: round trips, transactions, concurrency."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from phalanx.model.job import JobState
from phalanx.store import (
    UNFINISHED_STATES,
    JobEventRow,
    JobRow,
    NewJob,
    ObjectRow,
    Store,
    TokenRow,
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
    assert head_revision() == "0002"


def test_migrated_schema_matches_metadata(store: Store) -> None:
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, metadata)
        assert diff == []
        assert context.get_current_revision() == head_revision()
        assert set(inspect(conn).get_table_names()) == {
            "alembic_version",
            "jobs",
            "job_events",
            "objects",
            "tokens",
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


def test_insert_jobs_adds_submitted_events(store: Store, new_job: MakeJob) -> None:
    ids = _insert(store, [new_job(i) for i in range(3)])
    for i, job_id in enumerate(ids):
        (event,) = store.job_events(job_id)
        assert event.kind == "Submitted"
        assert event.job_id == job_id
        assert event.time == 1000.0 + i
        assert event.data == {}


def test_insert_10k_jobs_is_fast(store: Store, new_job: MakeJob) -> None:
    jobs = [new_job(i) for i in range(10_000)]
    started = time.perf_counter()
    ids = _insert(store, jobs)
    elapsed = time.perf_counter() - started
    assert len(ids) == 10_000 and ids == sorted(ids)
    limit = 1.0 if store.dialect == "sqlite" else 3.0
    assert elapsed < limit, f"inserting 10,000 jobs took {elapsed:.2f}s"

    store.list_jobs(limit=1000)  # warm the statement cache
    started = time.perf_counter()
    rows = store.list_jobs(limit=1000)
    elapsed = time.perf_counter() - started
    assert len(rows) == 1000
    assert elapsed < 0.1, f"listing 1,000 jobs took {elapsed * 1000:.1f}ms"


def test_update_job(store: Store, new_job: MakeJob) -> None:
    (job_id,) = _insert(store, [new_job()])
    assignment = {"admit": {"flavor": "a100"}, "gpus": {"n1": [0, 1]}, "attempt": 1}
    with store.begin() as tx:
        tx.update_job(
            job_id,
            state="RUNNING",
            flavor="a100",
            nodes=["n1", "n2"],
            assignment=assignment,
            start_time=5.5,
            attempt=1,
            cancel_requested=True,
            reason="Started",
            message="ok",
        )
        tx.update_job(job_id)  # nothing to do
        inside = tx.get_job(job_id)
        assert inside is not None and inside.state == "RUNNING"
    row = store.get_job(job_id)
    assert row is not None
    assert row.state == "RUNNING"
    assert row.flavor == "a100"
    assert row.nodes == ["n1", "n2"]
    assert row.assignment == assignment
    assert row.start_time == 5.5
    assert row.attempt == 1
    assert row.cancel_requested is True
    assert (row.reason, row.message) == ("Started", "ok")

    with store.begin() as tx:
        tx.update_job(job_id, assignment=None, state="COMPLETED", exit_code=0, end_time=9.0)
    row = store.get_job(job_id)
    assert row is not None
    assert row.assignment is None
    assert (row.state, row.exit_code, row.end_time) == ("COMPLETED", 0, 9.0)
    with store.engine.connect() as conn:
        # None is stored as SQL NULL, not JSON null
        null = conn.execute(
            text("SELECT count(*) FROM jobs WHERE assignment IS NULL AND id = :id"),
            {"id": job_id},
        ).scalar()
    assert null == 1


def test_update_job_rejects_unknown_fields(store: Store, new_job: MakeJob) -> None:
    (job_id,) = _insert(store, [new_job()])
    with pytest.raises(ValueError, match="bogus"), store.begin() as tx:
        tx.update_job(job_id, bogus=1)
    with pytest.raises(ValueError, match="id"), store.begin() as tx:
        tx.update_job(job_id, id=5)
    with pytest.raises(ValueError), store.begin() as tx:
        tx.update_jobs([(job_id, {"state": "RUNNING"}), (job_id, {"nope": 1})])
    row = store.get_job(job_id)
    assert row is not None and row.state == "PENDING"


def test_update_jobs_mixed_field_sets(store: Store, new_job: MakeJob) -> None:
    ids = _insert(store, [new_job(i) for i in range(6)])
    with store.begin() as tx:
        tx.update_jobs(
            [
                (ids[0], {"state": "ADMITTED", "flavor": "a"}),
                (ids[1], {"state": "ADMITTED", "flavor": "b"}),
                (ids[2], {"reason": "Quota", "message": "no quota"}),
                (ids[3], {"flavor": "c", "state": "ADMITTED"}),
                (ids[4], {}),
            ]
        )
        tx.update_jobs([])
    rows = {r.id: r for r in store.list_jobs()}
    assert (rows[ids[0]].state, rows[ids[0]].flavor) == ("ADMITTED", "a")
    assert (rows[ids[1]].state, rows[ids[1]].flavor) == ("ADMITTED", "b")
    assert (rows[ids[2]].state, rows[ids[2]].reason) == ("PENDING", "Quota")
    assert rows[ids[2]].message == "no quota"
    assert (rows[ids[3]].state, rows[ids[3]].flavor) == ("ADMITTED", "c")
    untouched = rows[ids[4]]
    assert (untouched.state, untouched.flavor, untouched.reason) == ("PENDING", None, "")


def test_list_jobs_filters(store: Store, new_job: MakeJob) -> None:
    specs = [
        ("team-a", "alice", "q1", "cq1"),
        ("team-a", "bob", "q2", "cq1"),
        ("team-b", "carol", "q1", "cq2"),
        ("team-b", "alice", None, None),
    ]
    ids = _insert(
        store,
        [
            new_job(i, tenant=t, user=u, queue=q, cluster_queue=cq)
            for i, (t, u, q, cq) in enumerate(specs)
        ],
    )
    with store.begin() as tx:
        tx.update_job(ids[1], state="RUNNING")
        tx.update_job(ids[2], state="COMPLETED")

    def listed(**kw: object) -> list[int]:
        return [r.id for r in store.list_jobs(**kw)]  # type: ignore[arg-type]

    assert listed() == ids
    assert listed(states=["PENDING"]) == [ids[0], ids[3]]
    assert listed(states=["RUNNING", "COMPLETED"]) == [ids[1], ids[2]]
    assert listed(states="RUNNING") == [ids[1]]
    assert listed(states=[]) == []
    assert listed(tenants=["team-a"]) == ids[:2]
    assert listed(users=["alice"]) == [ids[0], ids[3]]
    assert listed(queue="q1") == [ids[0], ids[2]]
    assert listed(cluster_queue="cq1") == ids[:2]
    assert listed(ids=[ids[3], ids[0], 99999]) == [ids[0], ids[3]]
    assert listed(tenants=["team-b"], users=["alice"]) == [ids[3]]
    assert listed(descending=True) == ids[::-1]
    assert listed(limit=2) == ids[:2]
    assert listed(limit=2, descending=True) == ids[:1:-1]


def test_keyset_pagination(store: Store, new_job: MakeJob) -> None:
    ids = _insert(store, [new_job(i) for i in range(25)])
    pages: list[list[int]] = []
    after: int | None = None
    while True:
        page = [r.id for r in store.list_jobs(after_id=after, limit=10)]
        if not page:
            break
        pages.append(page)
        after = page[-1]
    assert [len(p) for p in pages] == [10, 10, 5]
    assert [i for p in pages for i in p] == ids

    back: list[int] = []
    after = None
    while True:
        page = [r.id for r in store.list_jobs(after_id=after, limit=7, descending=True)]
        if not page:
            break
        back.extend(page)
        after = page[-1]
    assert back == ids[::-1]
    assert [r.id for r in store.list_jobs(after_id=ids[10], states=["PENDING"], limit=3)] == ids[
        11:14
    ]


def test_count_jobs(store: Store, new_job: MakeJob) -> None:
    assert store.count_jobs() == {}
    ids = _insert(
        store,
        [new_job(i, tenant="team-a" if i < 3 else "team-b") for i in range(5)],
    )
    with store.begin() as tx:
        tx.update_jobs([(ids[0], {"state": "RUNNING"}), (ids[4], {"state": "RUNNING"})])
    assert store.count_jobs() == {"PENDING": 3, "RUNNING": 2}
    assert store.count_jobs(tenants=["team-a"]) == {"PENDING": 2, "RUNNING": 1}
    assert store.count_jobs(states=["RUNNING"]) == {"RUNNING": 2}
    assert store.count_jobs(states=["RUNNING"], tenants=["team-b"]) == {"RUNNING": 1}


def test_unfinished_jobs(store: Store, new_job: MakeJob) -> None:
    assert set(UNFINISHED_STATES) == {s.value for s in JobState if not s.finished}
    states = [s.value for s in JobState]
    ids = _insert(store, [new_job(i) for i in range(len(states))])
    with store.begin() as tx:
        tx.update_jobs([(job_id, {"state": s}) for job_id, s in zip(ids, states, strict=True)])
    unfinished = store.unfinished_jobs()
    assert [r.state for r in unfinished] == [s for s in states if s in UNFINISHED_STATES]
    assert [r.id for r in unfinished] == sorted(r.id for r in unfinished)


def test_max_job_id_empty(store: Store) -> None:
    assert store.max_job_id() == 0


# -- events --------------------------------------------------------------------------


def test_events_round_trip(store: Store, new_job: MakeJob) -> None:
    a, b = _insert(store, [new_job(0), new_job(1)])
    with store.begin() as tx:
        tx.add_event(a, "Admitted", 2.0, reason="Fits", message="on n1", data={"nodes": ["n1"]})
        tx.add_event(b, "Pending", 2.5)
        tx.add_events(
            [
                (a, "Started", 3.0, "", "", None),
                (a, "Finished", 4.0, "Completed", "exit 0", {"exit_code": 0}),
            ]
        )
        tx.add_events([])
    events = store.job_events(a)
    assert [e.kind for e in events] == ["Submitted", "Admitted", "Started", "Finished"]
    assert events[1] == JobEventRow(
        id=events[1].id,
        job_id=a,
        time=2.0,
        kind="Admitted",
        reason="Fits",
        message="on n1",
        data={"nodes": ["n1"]},
    )
    assert events[2].data == {}
    assert events[3].data == {"exit_code": 0}
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert [e.kind for e in store.job_events(b)] == ["Submitted", "Pending"]
    assert store.job_events(99999) == []


def test_event_for_missing_job_is_rejected(store: Store) -> None:
    with pytest.raises(Exception), store.begin() as tx:  # noqa: B017 - driver-specific
        tx.add_event(424242, "Started", 1.0)


# -- transactions --------------------------------------------------------------------


def test_rollback_on_exception_leaves_nothing(store: Store, new_job: MakeJob) -> None:
    (kept,) = _insert(store, [new_job(0)])
    with pytest.raises(RuntimeError, match="boom"), store.begin() as tx:
        ids = tx.insert_jobs([new_job(i) for i in range(1, 50)])
        tx.add_event(ids[0], "Admitted", 1.0)
        tx.update_job(kept, state="RUNNING")
        tx.put_object("Flavor", "x", {"a": 1})
        tx.create_token(name="t", user="u", tenants=[], admin=True, token_hash="h", created=1.0)
        assert tx.get_job(ids[0]) is not None
        raise RuntimeError("boom")
    assert [r.id for r in store.list_jobs()] == [kept]
    row = store.get_job(kept)
    assert row is not None and row.state == "PENDING"
    for job_id in ids:
        assert store.get_job(job_id) is None
        assert store.job_events(job_id) == []
    assert store.objects() == []
    assert store.tokens() == []


def test_tx_unusable_after_exit(store: Store, new_job: MakeJob) -> None:
    with store.begin() as tx:
        pass
    with pytest.raises(RuntimeError):
        tx.insert_jobs([new_job()])


def test_reads_see_commits_from_other_threads(store: Store, new_job: MakeJob) -> None:
    done = threading.Event()
    ids: list[int] = []

    def writer() -> None:
        ids.extend(_insert(store, [new_job(1)]))
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    assert done.is_set()
    assert store.get_job(ids[0]) is not None
    assert [r.id for r in store.list_jobs()] == ids


def test_uncommitted_writes_are_invisible_to_reads(store: Store, new_job: MakeJob) -> None:
    with store.begin() as tx:
        (job_id,) = tx.insert_jobs([new_job()])
        assert store.get_job(job_id) is None
    assert store.get_job(job_id) is not None


def test_concurrent_writers(store: Store, new_job: MakeJob) -> None:
    threads, per_thread = 8, 500
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def worker(n: int) -> None:
        try:
            barrier.wait()
            got: list[int] = []
            for chunk in range(5):
                with store.begin() as tx:
                    got += tx.insert_jobs(
                        [
                            new_job(n * 1000 + chunk * 100 + i, name=f"w{n}-{chunk * 100 + i}")
                            for i in range(per_thread // 5)
                        ]
                    )
                    tx.add_event(got[-1], "Touched", 1.0)
            results[n] = got
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert errors == []
    all_ids = [i for ids in results.values() for i in ids]
    assert len(all_ids) == threads * per_thread
    assert len(set(all_ids)) == threads * per_thread
    rows = store.list_jobs()
    assert len(rows) == threads * per_thread
    assert {r.id for r in rows} == set(all_ids)
    by_id = {r.id: r.name for r in rows}
    for n, ids in results.items():
        assert ids == sorted(ids)
        assert [by_id[i] for i in ids] == [f"w{n}-{i}" for i in range(per_thread)]


# -- objects -------------------------------------------------------------------------


def test_put_object_outcomes(store: Store) -> None:
    spec = {"name": "a100", "labels": {"gpu": "a100"}, "gpus": 8}
    with store.begin() as tx:
        assert tx.put_object("Flavor", "a100", spec) == "created"
    first = store.get_object("Flavor", "a100")
    assert first is not None
    assert (first.kind, first.name, first.spec, first.generation) == ("Flavor", "a100", spec, 1)
    assert first.created == first.updated

    with store.begin() as tx:
        assert tx.put_object("Flavor", "a100", dict(spec)) == "unchanged"
    same = store.get_object("Flavor", "a100")
    assert same == first

    changed = {**spec, "gpus": 4}
    with store.begin() as tx:
        assert tx.put_object("Flavor", "a100", changed) == "configured"
        assert tx.put_object("Flavor", "a100", changed) == "unchanged"
    second = store.get_object("Flavor", "a100")
    assert second is not None
    assert (second.spec, second.generation, second.created) == (changed, 2, first.created)
    assert second.updated >= first.updated

    with store.begin() as tx:
        assert tx.put_object("Node", "n1", {"taints": ("a", "b"), "n": 1}) == "created"
        assert tx.put_object("Node", "n1", {"n": 1, "taints": ["a", "b"]}) == "unchanged"


def test_objects_listing_and_delete(store: Store) -> None:
    with store.begin() as tx:
        tx.put_object("Node", "n2", {"gpus": 8})
        tx.put_object("Node", "n1", {"gpus": 4})
        tx.put_object("Flavor", "a100", {})
    assert [(o.kind, o.name) for o in store.objects()] == [
        ("Flavor", "a100"),
        ("Node", "n1"),
        ("Node", "n2"),
    ]
    assert [o.name for o in store.objects("Node")] == ["n1", "n2"]
    assert store.objects("Cohort") == []
    assert all(isinstance(o, ObjectRow) for o in store.objects())
    with store.begin() as tx:
        assert tx.delete_object("Node", "n1") is True
        assert tx.delete_object("Node", "n1") is False
        assert tx.delete_object("Node", "missing") is False
    assert store.get_object("Node", "n1") is None
    assert [o.name for o in store.objects("Node")] == ["n2"]
    with store.begin() as tx:
        assert tx.put_object("Node", "n1", {"gpus": 4}) == "created"
    recreated = store.get_object("Node", "n1")
    assert recreated is not None and recreated.generation == 1


# -- tokens --------------------------------------------------------------------------


def test_tokens(store: Store) -> None:
    assert store.tokens() == []
    assert store.has_admin_token() is False
    with store.begin() as tx:
        user = tx.create_token(
            name="ci",
            user="bob",
            tenants=["team-a", "team-b"],
            admin=False,
            token_hash="hash-1",
            created=10.0,
            expires=None,
        )
    assert user == TokenRow(
        id=user.id,
        name="ci",
        user="bob",
        tenants=["team-a", "team-b"],
        admin=False,
        created=10.0,
        expires=None,
        revoked=False,
    )
    assert store.has_admin_token() is False
    with store.begin() as tx:
        expired = tx.create_token(
            name="old",
            user="root",
            tenants=[],
            admin=True,
            token_hash="hash-2",
            created=1.0,
            expires=2.0,
        )
    assert store.has_admin_token() is False  # expired
    with store.begin() as tx:
        admin = tx.create_token(
            name="root",
            user="root",
            tenants=[],
            admin=True,
            token_hash="hash-3",
            created=11.0,
            expires=time.time() + 3600,
        )
    assert admin.id > expired.id > user.id
    assert store.has_admin_token() is True
    assert store.find_token("hash-1") == user
    assert store.find_token("nope") is None
    assert [t.id for t in store.tokens()] == [user.id, expired.id, admin.id]

    with store.begin() as tx:
        assert tx.revoke_token(admin.id) is True
        assert tx.revoke_token(admin.id) is True
        assert tx.revoke_token(99999) is False
    revoked = store.find_token("hash-3")
    assert revoked is not None and revoked.revoked is True
    assert store.has_admin_token() is False


def test_token_hash_is_unique(store: Store) -> None:
    with store.begin() as tx:
        tx.create_token(name="a", user="u", tenants=[], admin=False, token_hash="h", created=1.0)
    with pytest.raises(Exception), store.begin() as tx:  # noqa: B017 - IntegrityError
        tx.create_token(name="b", user="u", tenants=[], admin=False, token_hash="h", created=1.0)
    assert len(store.tokens()) == 1


# -- backend details -----------------------------------------------------------------


def test_sqlite_readers_do_not_block_on_writer(tmp_path: Path, new_job: MakeJob) -> None:
    store = Store.open(state_dir=tmp_path)
    try:
        (job_id,) = _insert(store, [new_job()])
        with store.begin() as tx:
            tx.update_job(job_id, state="RUNNING")
            started = time.perf_counter()
            row = store.get_job(job_id)  # WAL: a reader sees the last commit at once
            assert time.perf_counter() - started < 1.0
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
