"""Watches: the store's revisions turned into ADDED / MODIFIED / DELETED events.

Every change to a job or an object takes the next store revision
(:meth:`phalanx.store.Store.changed_since`), so a watch from ``resourceVersion``
N asks the store what changed after N: it resumes exactly where a client left
off, across a restart of the server and on any server of an HA group, which all
read the same database. A :class:`Feed` per API server wakes the watches when the
revision moves (at once for writes made in this process, within
:data:`POLL_S` for writes of another server). Objects are delivered in their
latest state: several changes between two wake-ups arrive as one event. A
``resourceVersion`` older than the tombstones kept (:meth:`Store.compact`) is
answered with 410 Gone, and the client lists again.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from phalanx.kubeapi.handlers import Handlers, ListOptions
from phalanx.kubeapi.status import KubeError
from phalanx.kubeapi.storage import Ctx

__all__ = ["POLL_S", "Feed", "WatchOptions", "watch_events"]

POLL_S = 0.05
"""How often the feed asks the store for its revision while some watch is open."""

BOOKMARK_S = 10.0
"""How often a watch that asked for bookmarks gets one (a real server: about a minute)."""

TOMBSTONE_TTL_S = 3600.0
"""How long deleted objects stay watchable; a watch from before that gets 410 Gone."""

COMPACT_EVERY_S = 300.0


class Feed:
    """Wakes the open watches when the store's revision moves."""

    def __init__(self, store: Any, leading: Callable[[], bool] | None = None) -> None:
        self._store = store
        self._leading = leading
        self._compacted_at = 0.0
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._changed = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.revision = 0
        store.committed.append(self._changed.set)

    def subscribe(self) -> asyncio.Event:
        event = asyncio.Event()
        loop = asyncio.get_running_loop()
        with self._lock:
            self._waiters.add((loop, event))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kube-feed", daemon=True)
                self._thread.start()
        return event

    def unsubscribe(self, event: asyncio.Event) -> None:
        with self._lock:
            self._waiters = {w for w in self._waiters if w[1] is not event}

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        with contextlib.suppress(ValueError):
            self._store.committed.remove(self._changed.set)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def compact(self) -> None:
        """Forget tombstones older than :data:`TOMBSTONE_TTL_S` (the leader does it)."""
        self._compacted_at = time.monotonic()
        if self._leading is not None and not self._leading():
            return
        try:
            with self._store.begin() as tx:
                tx.compact(time.time() - TOMBSTONE_TTL_S)
        except Exception:  # fenced off, or the store is closing: the next round will do
            return

    def _run(self) -> None:
        last = -1
        while not self._stop.is_set():
            self._changed.wait(POLL_S)
            self._changed.clear()
            if time.monotonic() - self._compacted_at >= COMPACT_EVERY_S:
                self.compact()
            try:
                current, _ = self._store.revision()
            except RuntimeError:  # the store is closed: the server stopped
                return
            except Exception:  # a database hiccup: try again
                continue
            if current != last:
                last = current
                self.revision = current
                with self._lock:
                    waiters = list(self._waiters)
                for loop, event in waiters:
                    try:
                        loop.call_soon_threadsafe(event.set)
                    except RuntimeError:
                        self.unsubscribe(event)


@dataclass(frozen=True)
class WatchOptions:
    resource_version: str = ""
    label_selector: str = ""
    field_selector: str = ""
    timeout_s: float = 1800.0
    bookmarks: bool = False
    send_initial_events: bool | None = None


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


async def watch_events(
    handlers: Handlers,
    feed: Feed,
    ctx: Ctx,
    namespace: str | None,
    options: WatchOptions,
    disconnected: Callable[[], Any],
) -> AsyncIterator[dict[str, Any]]:
    """The events of one watch, as ``{"type", "object"}`` dicts, until the timeout or
    the client goes."""
    store = ctx.plane.store
    handlers.authorize(ctx, "watch", namespace)
    storage = handlers.storage(ctx.resource)
    matches, _ = handlers.selection(ctx, namespace, options.label_selector, options.field_selector)

    current, compacted = await run_in_threadpool(store.revision)
    rv = options.resource_version
    initial = options.send_initial_events
    if initial is None:
        initial = rv in ("", "0")
    if rv not in ("", "0"):
        try:
            start = int(rv)
        except ValueError:
            raise KubeError.bad_request(f"invalid resource version: {rv!r}") from None
        if start < compacted:
            yield {
                "type": "ERROR",
                "object": KubeError(
                    410, "Expired", f"too old resource version: {start} ({compacted})"
                ).body(),
            }
            return
    else:
        start = current
    list_options = ListOptions(options.label_selector, options.field_selector)
    selective = bool(options.label_selector or options.field_selector)
    present: list[dict[str, Any]] = []
    if initial or selective or not storage.tracks_creation:
        # What exists now: the initial events, or what a selector's watch has "seen".
        found, keep = await run_in_threadpool(handlers.matching, ctx, namespace, list_options)
        present = [o for o in found if keep(o)]
    known = {_key(o) for o in present}
    tracked = storage.tracks_creation and not selective
    origin = start
    announced: set[str] = set()
    deleted: set[str] = set()
    if initial:
        for obj in present:
            yield {"type": "ADDED", "object": obj}
        if options.send_initial_events:
            yield _bookmark(ctx, start, initial_end=True)
    event = feed.subscribe()
    deadline = time.monotonic() + options.timeout_s
    last_bookmark = time.monotonic()
    try:
        while time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout=1.0)
            event.clear()
            if await disconnected():
                return
            now_rv, compacted = await run_in_threadpool(store.revision)
            if now_rv > start:
                jobs, objects, gone = await run_in_threadpool(
                    store.changed_since, start, upto=now_rv
                )
                if storage.touched_by(jobs, objects, gone):
                    ctx.now = time.time()
                    changes = await run_in_threadpool(storage.changes, ctx, jobs, objects, gone)
                    for change in changes:
                        key = _key(change.object)
                        if change.type == "DELETED":
                            # Also an object the watch never saw: a resumed watch must
                            # hear of deletions since its revision (informers ignore a
                            # deletion they had no object for).
                            if key in known or (key not in deleted and matches(change.object)):
                                known.discard(key)
                                deleted.add(key)
                                yield {"type": "DELETED", "object": change.object}
                            continue
                        deleted.discard(key)
                        if matches(change.object):
                            fresh = change.created > origin and key not in announced
                            if tracked:
                                kind = "ADDED" if fresh else "MODIFIED"
                            else:
                                kind = "ADDED" if fresh or key not in known else "MODIFIED"
                            known.add(key)
                            announced.add(key)
                            yield {"type": kind, "object": change.object}
                        elif key in known:
                            known.discard(key)
                            yield {"type": "DELETED", "object": change.object}
                start = now_rv
            if options.bookmarks and time.monotonic() - last_bookmark >= BOOKMARK_S:
                last_bookmark = time.monotonic()
                yield _bookmark(ctx, start)
    finally:
        feed.unsubscribe(event)


def _bookmark(ctx: Ctx, revision: int, *, initial_end: bool = False) -> dict[str, Any]:
    r = ctx.resource
    meta: dict[str, Any] = {"resourceVersion": str(revision)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {
        "type": "BOOKMARK",
        "object": {"kind": r.kind, "apiVersion": r.api_version, "metadata": meta},
    }
