"""What the API needs from the control plane: the commands it forwards and the store it reads.

A :class:`typing.Protocol`, so the API depends on a shape, not on the control
package; every method is thread-safe and called from FastAPI's threadpool (``submit_later``
and ``cached_principal`` from the event loop: they never block).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from phalanx.auth import Principal
from phalanx.store.records import (
    JobChargeRow,
    JobEventRow,
    JobRow,
    ObjectRow,
    TokenRow,
    UsageRow,
)

__all__ = ["ControlPlane", "StoreReader"]


class StoreReader(Protocol):
    def get_job(self, job_id: int) -> JobRow | None: ...

    def list_jobs(
        self,
        *,
        states: Any = None,
        tenants: Any = None,
        users: Any = None,
        queue: str | None = None,
        cluster_queue: str | None = None,
        ids: Any = None,
        after_id: int | None = None,
        limit: int | None = None,
        descending: bool = False,
    ) -> list[JobRow]: ...

    def job_events(self, job_id: int) -> list[JobEventRow]: ...

    def objects(self, kind: str | None = None) -> list[ObjectRow]: ...

    def get_object(self, kind: str, name: str) -> ObjectRow | None: ...

    def tokens(self) -> list[TokenRow]: ...

    def usage(self) -> list[UsageRow]: ...

    def job_charges(self, ids: Any = None, *, running: bool = False) -> list[JobChargeRow]: ...


class ControlPlane(Protocol):
    @property
    def store(self) -> Any: ...

    @property
    def ready(self) -> bool: ...

    @property
    def leading(self) -> bool: ...

    @property
    def leader_url(self) -> str | None: ...

    def authenticate(self, token: str) -> Principal: ...

    def cached_principal(self, token: str) -> Principal | None: ...

    def submit(self, principal: Principal, submissions: list[Any]) -> list[int]: ...

    def submit_later(self, principal: Principal, submissions: list[Any]) -> Future[list[int]]:
        """:meth:`submit` without waiting (called on the event loop)."""
        ...

    def cancel(self, principal: Principal, job_id: int) -> JobRow: ...

    def job(self, principal: Principal, job_id: int) -> JobRow: ...

    def explain(self, principal: Principal, job_id: int) -> dict[str, Any]: ...

    def priority_factors(
        self, principal: Principal, job_ids: list[int] | None, users: list[str] | None
    ) -> dict[str, Any]: ...

    def apply(
        self,
        principal: Principal,
        manifests: list[Any],
        meta: dict[tuple[str, str], dict[str, Any]] | None = None,
    ) -> list[tuple[str, str, str]]: ...

    def delete(self, principal: Principal, kind: str, name: str) -> None: ...

    def put_meta(
        self, principal: Principal, kind: str, name: str, meta: dict[str, Any]
    ) -> None: ...

    def update_nodes(
        self, principal: Principal, names: list[str], state: str, reason: str = ""
    ) -> list[tuple[str, str, str]]: ...

    def create_token(
        self,
        principal: Principal,
        *,
        user: str,
        tenants: list[str],
        admin: bool = False,
        name: str = "",
        expires: float | None = None,
    ) -> tuple[str, TokenRow]: ...

    def revoke_tokens(self, principal: Principal, name: str) -> list[TokenRow]: ...

    def estimate(self, principal: Principal, submission: Any) -> dict[str, Any]: ...

    def hold(self, principal: Principal, job_id: int) -> JobRow: ...

    def release(self, principal: Principal, job_id: int) -> JobRow: ...

    def requeue(self, principal: Principal, job_id: int) -> JobRow: ...

    def signal(
        self, principal: Principal, job_id: int, signal: int, *, batch_only: bool = False
    ) -> JobRow: ...

    def update(self, principal: Principal, job_id: int, changes: dict[str, Any]) -> JobRow: ...

    def output_paths(self, job: JobRow) -> tuple[Path, Path | None]: ...

    def job_steps(
        self, principal: Principal, job_id: int, *, environment: bool = False
    ) -> dict[str, Any]: ...

    def steps_of(
        self, principal: Principal, job_ids: list[int]
    ) -> dict[int, list[dict[str, Any]]]: ...

    def steps_of_records(
        self, principal: Principal, records: Sequence[tuple[Any, ...]]
    ) -> dict[int, list[dict[str, Any]]]: ...

    def step_usage(self, principal: Principal, job_id: int) -> list[dict[str, Any]]: ...

    def output_owner(self, job: JobRow) -> int | None: ...

    def estimated_start(self, job_id: int) -> float | None: ...

    def no_estimate(self, job_id: int) -> str | None: ...

    def job_environment(self, principal: Principal, job_id: int) -> dict[str, str]: ...

    def cluster_queue_status(self) -> dict[str, dict[str, Any]]: ...

    def node_status(self, principal: Principal | None = None) -> dict[str, dict[str, Any]]: ...

    def render_metrics(self) -> bytes: ...

    def usage_report(self) -> dict[str, Any]: ...
