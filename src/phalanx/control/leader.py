"""Leader election: keeps this server leading (the control loop runs) or standing by.

Several ``phalanx up`` against one PostgreSQL share its leader lease
(:mod:`phalanx.store.lease`). The :class:`Elector` thread looks every
:data:`POLL_S`: the leader renews its lease; a standby takes the lease when it
is free and then starts the control plane, which rebuilds everything from the
store and re-adopts the running jobs through their supervisors. A leader that
finds the lease lost (its renewal or a fenced write says so) steps down at
once: its loop stops, it forgets the jobs it watched, and it stands by.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from phalanx.control.plane import ControlPlane
from phalanx.errors import NotLeader
from phalanx.store.lease import Lease

__all__ = ["POLL_S", "Elector"]

log = logging.getLogger("phalanx.lease")

POLL_S = 0.5
"""How often a standby looks at the lease (and how soon it sees a killed leader)."""
RENEW_S = 1.0
"""How often the leader renews (a third of the lease's default life)."""


class Elector:
    """Drives ``plane`` by ``lease``: :meth:`start` decides the first role synchronously."""

    def __init__(
        self,
        plane: ControlPlane,
        lease: Lease,
        *,
        on_lead: Callable[[], None] | None = None,
        poll_s: float = POLL_S,
        renew_s: float = RENEW_S,
    ) -> None:
        self.plane = plane
        self.lease = lease
        self.on_lead = on_lead
        """Called each time this server starts leading (after its recovery)."""
        self.poll_s = poll_s
        self.renew_s = renew_s
        self.terms = 0
        """How many times this server has started leading."""
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._fenced = threading.Event()
        """The loop stopped on a fenced write: step down at the next look."""
        self._thread: threading.Thread | None = None
        plane.lease = lease
        plane.store.fence = lease.fence
        plane.on_lost_lead = self._on_fenced

    def start(self) -> Elector:
        """Lead if the lease is free, stand by otherwise; then keep watching."""
        if not (self.lease.try_acquire() and self._lead()):
            self._see_leader()
            self.plane.stand_by()
        self._thread = threading.Thread(target=self._run, name="phalanx-elector", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching; a leader stops its loop and gives the lease up for a standby."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.plane.stop()
        self.lease.release()
        self.lease.close()

    # -- the thread -------------------------------------------------------------------

    def _on_fenced(self) -> None:
        self._fenced.set()
        self._lost.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            leading = self.plane.leading and self.lease.epoch is not None
            self._lost.wait(self.renew_s if leading else self.poll_s)
            self._lost.clear()
            if self._stop.is_set():
                break
            try:
                if self._fenced.is_set():
                    self._fenced.clear()
                    self._step_down()
                elif self.plane.leading and self.lease.epoch is not None:
                    if self.lease.renew() is False:
                        self._step_down()
                elif self.plane.leading or self.lease.epoch is not None:
                    self._step_down()  # the loop was fenced off, or the lease was lost
                elif self.lease.try_acquire():
                    self._lead()
                else:
                    self._see_leader()
            except Exception:  # the elector must outlive any one failure
                log.exception("leader election step failed; trying again")

    def _lead(self) -> bool:
        try:
            self.plane.start()
        except NotLeader:
            log.warning("the lease was taken while this server recovered: standing by")
            self._step_down()
            return False
        except Exception:
            # The store failed mid-recovery: give the lease back for another server.
            log.exception("starting to lead failed: giving the lease up")
            self.lease.release()
            self.plane.step_down()
            return False
        self.terms += 1
        self.plane.leader_url = self.lease.url
        if self.on_lead is not None:
            try:
                self.on_lead()
            except Exception:
                log.exception("setting up after taking the lead failed")
        return True

    def _step_down(self) -> None:
        self.lease.step_down()
        self.plane.step_down()
        self._see_leader()

    def _see_leader(self) -> None:
        try:
            row = self.lease.current()
        except Exception:
            return
        self.plane.leader_url = row.url if row is not None and not row.free else None
