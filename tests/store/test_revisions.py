"""Store revisions: every change to a job or an object takes the next number, in commit
order; ``changed_since`` answers "what changed after revision N" (the Kubernetes API's
resourceVersion and watch), deleted objects leave tombstones, and compaction forgets them."""

from __future__ import annotations

from collections.abc import Callable

from phalanx.store import NewJob, Store

MakeJob = Callable[..., NewJob]


def test_every_change_takes_the_next_revision(store: Store, new_job: MakeJob) -> None:
    assert store.revision() == (0, 0)
    with store.begin() as tx:
        a, b = tx.insert_jobs([new_job(1), new_job(2)])
    job_a, job_b = store.get_job(a), store.get_job(b)
    assert job_a is not None and job_b is not None
    assert {job_a.revision, job_b.revision} == {1, 2}
    assert store.revision()[0] == 2
    with store.begin() as tx:
        tx.update_job(a, state="RUNNING")
    after = store.get_job(a)
    assert after is not None and after.revision == 3
    with store.begin() as tx:
        tx.add_event(b, "Pending", 2000.0, reason="Resources")
    moved = store.get_job(b)
    assert moved is not None and moved.revision == 4
    jobs, objects, gone = store.changed_since(2)
    assert [j.id for j in jobs] == [a, b]
    assert objects == [] and gone == []
    assert store.changed_since(4) == ([], [], [])


def test_objects_revisions_meta_and_tombstones(store: Store, new_job: MakeJob) -> None:
    with store.begin() as tx:
        assert tx.put_object("ResourceFlavor", "rf", {"name": "rf"}) == "created"
    with store.begin() as tx:
        assert tx.put_object("ResourceFlavor", "rf", {"name": "rf"}) == "unchanged"
    row = store.get_object("ResourceFlavor", "rf")
    assert row is not None and row.revision == 1
    with store.begin() as tx:
        tx.put_meta("ResourceFlavor", "rf", {"labels": {"a": "b"}, "uid": "u-1"})
    row = store.get_object("ResourceFlavor", "rf")
    assert row is not None and row.revision == 2
    assert store.meta("ResourceFlavor") == {"rf": {"labels": {"a": "b"}, "uid": "u-1"}}
    with store.begin() as tx:
        assert tx.delete_object("ResourceFlavor", "rf")
        assert not tx.delete_object("ResourceFlavor", "rf")
    assert store.meta("ResourceFlavor") == {}
    jobs, objects, gone = store.changed_since(0)
    assert jobs == [] and objects == []
    assert [(t.kind, t.name, t.revision, t.meta) for t in gone] == [
        ("ResourceFlavor", "rf", 3, {"labels": {"a": "b"}, "uid": "u-1"})
    ]
    # A job's metadata moves the job.
    with store.begin() as tx:
        (job,) = tx.insert_jobs([new_job(1)])
    with store.begin() as tx:
        tx.put_meta("job", str(job), {"deleted": 5.0})
    row_job = store.get_job(job)
    assert row_job is not None and row_job.revision == 5
    assert store.meta("job", [str(job)]) == {str(job): {"deleted": 5.0}}
    # Compaction forgets tombstones and says up to where.
    with store.begin() as tx:
        assert tx.compact(before=gone[0].time + 1) == 1
    assert store.revision() == (5, 3)
    assert store.changed_since(0)[2] == []


def test_a_rolled_back_transaction_takes_no_revision(store: Store, new_job: MakeJob) -> None:
    class Boom(Exception):
        pass

    try:
        with store.begin() as tx:
            tx.insert_jobs([new_job(1)])
            tx.flush()
            raise Boom
    except Boom:
        pass
    assert store.revision() == (0, 0)
    with store.begin() as tx:
        (job,) = tx.insert_jobs([new_job(2)])
    row = store.get_job(job)
    assert row is not None and row.revision == 1
