"""The leader lease on a real PostgreSQL: one holder at a time, takeover when the holder's
session is gone or its lease expired, and the fence that keeps an old leader from writing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from phalanx.errors import NotLeader
from phalanx.store import Store
from phalanx.store.lease import Lease

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def store(postgres_url: str, tmp_path: Path) -> Iterator[Store]:
    store = Store.open(postgres_url, state_dir=tmp_path)
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM leader_lease"))
    yield store
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM leader_lease"))
    store.close()


def _lease(store: Store, name: str, ttl_s: float = 3.0) -> Lease:
    return Lease(store.engine, name, f"http://{name}", ttl_s=ttl_s)


def _token_names(store: Store) -> set[str]:
    return {row.name for row in store.tokens()}


def _write_token(store: Store, name: str) -> None:
    with store.begin() as tx:
        tx.create_token(
            name=name, user=name, tenants=["t"], admin=False, token_hash=f"h-{name}", created=0.0
        )


def test_one_holder_at_a_time(store: Store) -> None:
    a, b = _lease(store, "a"), _lease(store, "b")
    try:
        assert a.try_acquire() and a.epoch == 1
        assert not b.try_acquire() and b.epoch is None
        assert a.renew() is True
        row = b.current()
        assert row is not None and row.holder == "a" and row.url == "http://a" and not row.free
    finally:
        a.close()
        b.close()


def test_a_killed_leaders_lease_is_taken_at_once(store: Store) -> None:
    """The leader's lease session gone (as when its process is killed): a standby takes
    over without waiting for the expiry, with the next epoch; the old leader is fenced."""
    a, b = _lease(store, "a", ttl_s=60), _lease(store, "b", ttl_s=60)
    try:
        assert a.try_acquire()
        held = a.epoch
        a.close()  # its session ends; its lease has 60 s left
        deadline = time.monotonic() + 5
        while not b.try_acquire():
            assert time.monotonic() < deadline, "the standby did not take a dead leader's lease"
            time.sleep(0.05)
        assert b.epoch == (held or 0) + 1
        # The old leader comes back (a new connection): its renewal says lost, its
        # writes are refused.
        store.fence = a.fence
        with pytest.raises(NotLeader):
            _write_token(store, "from-a")
        assert a.renew() is False
        assert "from-a" not in _token_names(store)
    finally:
        store.fence = None
        a.close()
        b.close()


def test_a_paused_leader_is_replaced_and_cannot_write_when_it_wakes(store: Store) -> None:
    """A leader that stops renewing (paused) loses the lease when it expires; its next
    transaction, after it wakes, is refused and writes nothing."""
    a, b = _lease(store, "a", ttl_s=0.5), _lease(store, "b", ttl_s=30)
    store.fence = a.fence
    try:
        assert a.try_acquire()
        _write_token(store, "before")
        assert not b.try_acquire()  # alive and within its lease
        time.sleep(0.8)  # "paused": no renewal
        assert b.try_acquire()
        with pytest.raises(NotLeader):
            _write_token(store, "after")
        assert a.epoch is None
        assert _token_names(store) >= {"before"}
        assert "after" not in _token_names(store)
        # Writes any server may make are not fenced.
        with store.begin(fenced=False) as tx:
            tx.create_token(
                name="any", user="u", tenants=["t"], admin=False, token_hash="h-any", created=0.0
            )
    finally:
        store.fence = None
        a.close()
        b.close()


def test_a_takeover_waits_for_the_leaders_open_transaction(store: Store) -> None:
    """The fence's row lock makes each of the old leader's transactions commit wholly
    before the new leader starts, or not at all."""
    a, b = _lease(store, "a", ttl_s=0.3), _lease(store, "b", ttl_s=30)
    store.fence = a.fence
    try:
        assert a.try_acquire()
        inside = threading.Event()
        finish = threading.Event()

        def slow_write() -> None:
            with store.begin() as tx:
                tx.create_token(
                    name="slow",
                    user="u",
                    tenants=["t"],
                    admin=False,
                    token_hash="h-slow",
                    created=0.0,
                )
                tx.flush()
                inside.set()
                finish.wait(10)

        writer = threading.Thread(target=slow_write)
        writer.start()
        assert inside.wait(10)
        time.sleep(0.5)  # the lease has expired, but the transaction is open
        assert not b.try_acquire()  # waits on the open transaction, then gives up for now
        finish.set()
        writer.join(10)
        assert "slow" in _token_names(store)  # committed before the takeover
        assert b.try_acquire()
        with pytest.raises(NotLeader):
            _write_token(store, "late")
    finally:
        finish.set()
        store.fence = None
        a.close()
        b.close()


def test_a_released_lease_is_free_for_the_next(store: Store) -> None:
    a, b = _lease(store, "a", ttl_s=60), _lease(store, "b", ttl_s=60)
    try:
        assert a.try_acquire()
        a.release()
        assert a.epoch is None
        assert b.try_acquire() and b.epoch == 2
    finally:
        a.close()
        b.close()
