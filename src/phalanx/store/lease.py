"""The leader lease: one row in PostgreSQL that several phalanx servers contend for.

One server leads (runs the control loop, launches and watches jobs); the others
stand by. The lease row says who leads, until when, and under which *epoch*:

- **acquire**: a standby takes the lease when it is free, expired (the leader
  stopped renewing, for example because it is paused), or when the leader's lease
  session is gone from ``pg_stat_activity`` (a killed leader's connections close at
  once). Taking it adds one to the epoch.
- **renew**: the leader pushes ``expires`` forward every second; a renewal that
  finds the row no longer its own means the lease was lost.
- **fence**: every write transaction of the leader first reads the row with
  ``FOR KEY SHARE`` and goes on only if the epoch is still its own. A takeover locks
  the row ``FOR UPDATE`` (which waits for the leader's open transaction), so each of
  the old leader's transactions either commits before the new leader starts or is
  refused: a paused leader that wakes up cannot write anything.

All times are the database's clock, so the servers' clocks do not matter. SQLite
has no lease: one server per state directory (a file lock) is enough there.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import NullPool

from phalanx.errors import NotLeader

__all__ = ["DEFAULT_TTL_S", "Lease", "LeaseRow"]

log = logging.getLogger("phalanx.lease")

DEFAULT_TTL_S = 3.0
"""How long a lease lasts without renewal: a paused or cut-off leader is replaced after it."""

_ROW_ID = 1
_NOW = "extract(epoch from clock_timestamp())"
_MY_SESSION = (
    "pg_backend_pid(), "
    "(SELECT extract(epoch from backend_start) FROM pg_stat_activity "
    "WHERE pid = pg_backend_pid())"
)


@dataclass(frozen=True)
class LeaseRow:
    """The lease as stored: who holds it (``None``: nobody), its epoch and the leader's URL."""

    holder: str | None
    epoch: int
    url: str
    expires: float | None
    now: float
    session_alive: bool

    @property
    def free(self) -> bool:
        """Nobody holds it, it expired, or its holder's session is gone."""
        return (
            self.holder is None
            or self.expires is None
            or self.expires <= self.now
            or not self.session_alive
        )


class Lease:
    """This server's side of the lease, on a connection of its own.

    Thread-safe. ``epoch`` is the epoch held, ``None`` while standing by.
    """

    def __init__(
        self, engine: Engine, holder: str, url: str, *, ttl_s: float = DEFAULT_TTL_S
    ) -> None:
        # A connection of its own, outside the store's pool: its session is the
        # leader's heartbeat, and closing it must end that session.
        self.engine = create_engine(engine.url, poolclass=NullPool)
        self.holder = holder
        self.url = url
        self.ttl_s = ttl_s
        self.epoch: int | None = None
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    # -- the lease connection -------------------------------------------------------

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self._discard()
            self._conn = self.engine.connect()
        return self._conn

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                log.debug("closing the lease connection failed", exc_info=True)

    def close(self) -> None:
        with self._lock:
            self._discard()
        self.engine.dispose()

    # -- reading --------------------------------------------------------------------

    def current(self) -> LeaseRow | None:
        """The lease row (``None`` before anyone took it); raises on a database error."""
        with self._lock:
            try:
                return self._read(self._connection())
            except DBAPIError:
                self._discard()
                raise
            finally:
                if self._conn is not None and self._conn.in_transaction():
                    self._conn.rollback()

    @staticmethod
    def _read(conn: Connection, *, lock: bool = False) -> LeaseRow | None:
        row = conn.execute(
            text(
                "SELECT holder, epoch, url, expires, "
                f"{_NOW} AS now, "
                "(backend_pid IS NOT NULL AND EXISTS (SELECT 1 FROM pg_stat_activity a "
                "  WHERE a.pid = l.backend_pid "
                "  AND abs(extract(epoch from a.backend_start) - l.backend_start) < 0.001)) "
                "AS alive "
                "FROM leader_lease l WHERE id = :id" + (" FOR UPDATE OF l" if lock else "")
            ),
            {"id": _ROW_ID},
        ).first()
        if row is None:
            return None
        holder, epoch, url, expires, now, alive = row
        return LeaseRow(holder, int(epoch), url or "", expires, float(now), bool(alive))

    # -- taking, keeping, giving back -----------------------------------------------

    def try_acquire(self) -> bool:
        """Take the lease if it is free; True when this server now leads."""
        with self._lock:
            try:
                return self._try_acquire(self._connection())
            except DBAPIError as exc:
                log.info("taking the leader lease failed: %s", _brief(exc))
                self._discard()
                return False

    def _try_acquire(self, conn: Connection) -> bool:
        try:
            seen = self._read(conn)
            conn.rollback()
            if seen is not None and not seen.free and seen.holder != self.holder:
                return False
            with conn.begin():
                # Waits for the leader's open transaction (its fence holds FOR KEY
                # SHARE); a leader paused mid-transaction is cut off by the server's
                # idle_in_transaction_session_timeout, so do not wait here for long.
                conn.execute(text("SET LOCAL lock_timeout = '1s'"))
                conn.execute(
                    text(
                        "INSERT INTO leader_lease (id, holder, epoch, url) "
                        "VALUES (:id, NULL, 0, '') ON CONFLICT (id) DO NOTHING"
                    ),
                    {"id": _ROW_ID},
                )
                row = self._read(conn, lock=True)
                assert row is not None
                if not row.free and row.holder != self.holder:
                    return False
                epoch = row.epoch + 1
                conn.execute(
                    text(
                        "UPDATE leader_lease SET holder = :holder, epoch = :epoch, url = :url, "
                        f"(backend_pid, backend_start) = (SELECT {_MY_SESSION}), "
                        f"acquired = {_NOW}, renewed = {_NOW}, expires = {_NOW} + :ttl "
                        "WHERE id = :id"
                    ),
                    {
                        "holder": self.holder,
                        "epoch": epoch,
                        "url": self.url,
                        "ttl": self.ttl_s,
                        "id": _ROW_ID,
                    },
                )
        except OperationalError as exc:
            if "lock timeout" in str(exc).lower():
                return False
            raise
        self.epoch = epoch
        log.warning("leading (lease epoch %d, previous holder %s)", epoch, row.holder or "none")
        return True

    def renew(self) -> bool | None:
        """Push the lease's expiry forward: True when still held, False when lost
        (another server took it), ``None`` when the database could not be reached."""
        with self._lock:
            epoch = self.epoch
            if epoch is None:
                return False
            try:
                conn = self._connection()
                with conn.begin():
                    result = conn.execute(
                        text(
                            f"UPDATE leader_lease SET renewed = {_NOW}, "
                            f"expires = {_NOW} + :ttl, "
                            f"(backend_pid, backend_start) = (SELECT {_MY_SESSION}) "
                            "WHERE id = :id AND holder = :holder AND epoch = :epoch"
                        ),
                        {"ttl": self.ttl_s, "id": _ROW_ID, "holder": self.holder, "epoch": epoch},
                    )
            except DBAPIError as exc:
                log.info("renewing the leader lease failed: %s", _brief(exc))
                self._discard()
                return None
            if result.rowcount == 1:
                return True
            self.epoch = None
            log.warning("lost the leader lease (epoch %d): another server leads now", epoch)
            return False

    def release(self) -> None:
        """Give the lease up (a clean stop): a standby takes over at its next look."""
        with self._lock:
            epoch, self.epoch = self.epoch, None
            if epoch is None:
                return
            try:
                conn = self._connection()
                with conn.begin():
                    conn.execute(
                        text(
                            "UPDATE leader_lease SET holder = NULL, expires = NULL, "
                            "backend_pid = NULL, backend_start = NULL "
                            "WHERE id = :id AND holder = :holder AND epoch = :epoch"
                        ),
                        {"id": _ROW_ID, "holder": self.holder, "epoch": epoch},
                    )
            except DBAPIError as exc:
                log.info("giving up the leader lease failed (it expires): %s", _brief(exc))
                self._discard()

    def step_down(self) -> None:
        """Forget the lease without touching the database (it was lost)."""
        with self._lock:
            self.epoch = None

    # -- the fence ------------------------------------------------------------------

    def fence(self, conn: Connection) -> None:
        """Refuse the transaction on ``conn`` unless this server still holds the lease.

        Called first in every write transaction. The row lock it takes (``FOR KEY
        SHARE``) is held until the transaction ends: renewals go on beside it, a
        takeover waits for it.
        """
        epoch = self.epoch
        if epoch is not None:
            row = conn.execute(
                text(
                    "SELECT 1 FROM leader_lease WHERE id = :id AND holder = :holder "
                    "AND epoch = :epoch FOR KEY SHARE"
                ),
                {"id": _ROW_ID, "holder": self.holder, "epoch": epoch},
            ).first()
            if row is not None:
                return
            self.epoch = None
        raise NotLeader("this server does not lead (it stands by)", leader=None)


def _brief(exc: BaseException) -> str:
    return str(getattr(exc, "orig", exc)).strip().splitlines()[0] if str(exc) else repr(exc)
