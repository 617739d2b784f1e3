"""``/api/v1/jobs``: submit, list (keyset pagination), inspect, cancel, events and output."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from phalanx.api.deps import Caller, Plane, job_id
from phalanx.api.output import ForeignOutput, read_output
from phalanx.api.render import JobViewCache, list_body
from phalanx.api.views import EventView, JobList, JobView, event_view, job_view, rfc3339
from phalanx.errors import Forbidden, Invalid, NotFound
from phalanx.model.job import JobState
from phalanx.model.submission import JobSubmission
from phalanx.store.records import JobRow

__all__ = ["MAX_BATCH", "MAX_LIST", "router"]

MAX_BATCH = 10_000
MAX_LIST = 10_000
DEFAULT_LIST = 500
MAX_LOG_CHUNK = 16 << 20
MAX_ID = 2**63 - 1

JobId = Annotated[int, Path(ge=0, le=MAX_ID, description="the job's id")]

router = APIRouter(prefix="/api/v1", tags=["jobs"])


class Submitted(BaseModel):
    id: int
    ids: list[int]


class BatchRequest(BaseModel):
    jobs: list[JobSubmission] = Field(min_length=1, max_length=MAX_BATCH)


class BatchSubmitted(BaseModel):
    ids: list[int]


def _states(values: list[str]) -> list[str] | None:
    states: list[str] = []
    for value in values:
        for part in value.split(","):
            name = part.strip().upper()
            if not name:
                continue
            if name not in JobState.__members__:
                known = ", ".join(JobState.__members__)
                raise Invalid(f"state (query): unknown job state {part.strip()!r}; one of {known}")
            states.append(name)
    return states or None


def _split(values: list[str]) -> list[str]:
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def _ids(values: list[str]) -> list[int] | None:
    return [job_id(part) for part in _split(values)] or None


@router.get("/jobs", responses={200: {"model": JobList}})
def list_jobs(
    request: Request,
    plane: Plane,
    principal: Caller,
    state: Annotated[list[str], Query(description="repeatable or comma-separated")] = [],  # noqa: B006
    tenant: Annotated[list[str], Query()] = [],  # noqa: B006
    user: Annotated[list[str], Query()] = [],  # noqa: B006
    queue: str | None = None,
    cluster_queue: str | None = None,
    name: Annotated[list[str], Query(description="job names")] = [],  # noqa: B006
    id: Annotated[list[str], Query(description="job ids")] = [],  # noqa: B006
    array_job_id: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = DEFAULT_LIST,
    continue_: Annotated[str | None, Query(alias="continue")] = None,
    order: Literal["asc", "desc"] = "asc",
    mine: Annotated[
        bool, Query(description="only the caller's own jobs, unless the caller is the admin")
    ] = False,
    steps: Annotated[bool, Query(description="each listed job's steps too")] = False,
    nodes_down: Annotated[
        bool, Query(description="the names of the nodes out of service too")
    ] = False,
) -> Response:
    """Jobs visible to the caller, oldest first (``order=desc``: newest first).

    ``mine=true``: only the caller's jobs (the admin's token: every user's), and the page
    says whose (``"mine": {"user", "admin"}``); ``steps=true``: the page has ``"steps"``,
    each listed job's steps by job id, as ``GET /api/v1/steps`` gives them. With both,
    ``sacct`` is one request instead of three (``whoami``, ``jobs``, ``steps``).
    ``nodes_down=true``: the page has ``"nodes_down"``, the nodes draining, drained or
    down, so that ``squeue`` asks for the nodes only when its reasons need them."""
    extra: dict[str, Any] = {}
    if nodes_down:
        status = plane.node_status(principal)
        extra["nodes_down"] = sorted(
            name
            for name, entry in status.items()
            if str(entry.get("state") or "") in ("draining", "drain", "down")
        )
    if mine:
        extra["mine"] = {"user": principal.user, "admin": principal.admin}
        if not principal.admin:
            user = [principal.user]
    tenants: list[str] | None = _split(tenant) or None
    if not principal.admin:
        tenants = sorted(set(tenants or principal.tenants) & principal.tenants)
        if not tenants:
            if steps:
                extra["steps"] = {}
            return JSONResponse({"items": [], "continue": None, **extra})
    after_id = None
    if continue_:
        try:
            after_id = int(continue_)
        except ValueError:
            after_id = -1
        if not 0 <= after_id <= MAX_ID:
            raise Invalid(f"continue (query): {continue_!r} is not a token this API gave")
    records = plane.store.list_job_records(
        states=_states(state),
        tenants=tenants,
        users=_split(user) or None,
        queue=queue,
        cluster_queue=cluster_queue,
        names=_split(name) or None,
        ids=_ids(id),
        array_job_id=array_job_id,
        after_id=after_id,
        limit=limit + 1,
        descending=order == "desc",
    )
    more = len(records) > limit
    records = records[:limit]
    token = str(records[-1][0]) if more and records else None
    if steps:
        found = plane.steps_of_records(principal, records)
        extra["steps"] = {str(k): v for k, v in found.items()}
    body = list_body(_views(request, plane).render(records), token, extra)
    return Response(body, media_type=JSON)


JSON = "application/json"


def _views(request: Request, plane: Plane) -> JobViewCache:
    """The app's cache of rendered job views (made on first use)."""
    cache: JobViewCache | None = getattr(request.app.state, "job_views", None)
    if cache is None or cache.plane is not plane:
        cache = request.app.state.job_views = JobViewCache(plane)
    return cache


@router.post("/jobs", status_code=201, response_model=Submitted)
def submit(plane: Plane, principal: Caller, job: JobSubmission) -> dict[str, Any]:
    """Submit one job; answers once it is durable."""
    ids = plane.submit(principal, [job])
    return {"id": ids[0], "ids": ids}


@router.post("/jobs/estimate")
def estimate_job(plane: Plane, principal: Caller, job: JobSubmission) -> dict[str, Any]:
    """Validate a job without submitting it: its partition, size and the start the
    engine plans for it (``sbatch --test-only``; ``why`` when there is none)."""
    answer = plane.estimate(principal, job)
    answer["start_time"] = rfc3339(answer.get("start_time"))
    return answer


@router.post("/jobs/batch", status_code=201, response_model=BatchSubmitted)
def submit_batch(plane: Plane, principal: Caller, batch: BatchRequest) -> dict[str, Any]:
    """Submit up to 10,000 jobs in one transaction: all are accepted, or none."""
    return {"ids": plane.submit(principal, list(batch.jobs))}


def _view(plane: Plane, row: JobRow) -> dict[str, Any]:
    return job_view(
        row, plane.output_paths(row), plane.estimated_start(row.id), plane.no_estimate(row.id)
    )


@router.get("/jobs/{job_id}", responses={200: {"model": JobView}})
def get_job(plane: Plane, principal: Caller, job_id: JobId) -> Response:
    row = plane.job(principal, job_id)
    return JSONResponse(_view(plane, row))


@router.delete("/jobs/{job_id}", responses={200: {"model": JobView}})
def cancel_job(plane: Plane, principal: Caller, job_id: JobId) -> Response:
    """Cancel a job (pending: removed from its queue; running: SIGTERM, grace, SIGKILL)."""
    row = plane.cancel(principal, job_id)
    return JSONResponse(_view(plane, row))


class SignalRequest(BaseModel):
    signal: int = Field(ge=1, le=64)
    batch_only: bool = False


class JobUpdate(BaseModel):
    """The fields ``scontrol update`` may change; absent ones stay as they are."""

    model_config = {"extra": "forbid"}
    time_limit: int | None = Field(default=None, ge=1)
    nice: int | None = None
    comment: str | None = Field(default=None, max_length=4096)
    name: str | None = Field(default=None, max_length=1024)


@router.post("/jobs/{job_id}/hold", responses={200: {"model": JobView}})
def hold_job(plane: Plane, principal: Caller, job_id: JobId) -> Response:
    """Keep a pending job from starting (Slurm's ``scontrol hold``)."""
    row = plane.hold(principal, job_id)
    return JSONResponse(_view(plane, row))


@router.post("/jobs/{job_id}/release", responses={200: {"model": JobView}})
def release_job(plane: Plane, principal: Caller, job_id: JobId) -> Response:
    row = plane.release(principal, job_id)
    return JSONResponse(_view(plane, row))


@router.post("/jobs/{job_id}/requeue", responses={200: {"model": JobView}})
def requeue_job(plane: Plane, principal: Caller, job_id: JobId) -> Response:
    """Stop a running job and queue it again (or queue a finished one again)."""
    row = plane.requeue(principal, job_id)
    return JSONResponse(_view(plane, row))


@router.post("/jobs/{job_id}/signal", responses={200: {"model": JobView}})
def signal_job(plane: Plane, principal: Caller, job_id: JobId, body: SignalRequest) -> Response:
    """Send a signal to a running job's tasks, or only to its batch shell."""
    row = plane.signal(principal, job_id, body.signal, batch_only=body.batch_only)
    return JSONResponse(_view(plane, row))


@router.patch("/jobs/{job_id}", responses={200: {"model": JobView}})
def update_job(plane: Plane, principal: Caller, job_id: JobId, body: JobUpdate) -> Response:
    """Change a job's time limit, nice value, comment or name."""
    changes = body.model_dump(exclude_unset=True)
    if not changes:
        raise Invalid("body: name at least one of time_limit, nice, comment, name")
    row = plane.update(principal, job_id, changes)
    return JSONResponse(_view(plane, row))


@router.get("/jobs/{job_id}/explain")
def explain_job(plane: Plane, principal: Caller, job_id: JobId) -> Response:
    """Why the job is pending (or where it runs and why): its position in its queue and
    the cluster, its priority, what is short and where, the reservations ahead of it, its
    expected start, what happened to it; ``text`` says it in plain words."""
    return JSONResponse(plane.explain(principal, job_id))


@router.get("/jobs/{job_id}/events", responses={200: {"model": list[EventView]}})
def job_events(plane: Plane, principal: Caller, job_id: JobId) -> Response:
    plane.job(principal, job_id)
    return JSONResponse({"items": [event_view(e) for e in plane.store.job_events(job_id)]})


@router.get("/jobs/{job_id}/steps")
def job_steps(
    plane: Plane, principal: Caller, job_id: JobId, environment: bool = False
) -> Response:
    """The job's steps (Slurm's ``srun`` steps) and, while it runs, its step socket
    (``?environment=true``: and its batch environment, for ``salloc``)."""
    return JSONResponse(plane.job_steps(principal, job_id, environment=environment))


@router.get("/jobs/{job_id}/steps/usage")
def job_step_usage(plane: Plane, principal: Caller, job_id: JobId) -> Response:
    """The running steps' usage, task by task (``sstat``)."""
    plane.job(principal, job_id)
    return JSONResponse({"jobId": job_id, "steps": plane.step_usage(principal, job_id)})


@router.get("/steps")
def steps(
    plane: Plane,
    principal: Caller,
    jobs: Annotated[list[str], Query()] = [],  # noqa: B006
) -> Response:
    """The steps of the given jobs (``?jobs=1,2``), those the caller may see."""
    ids = _ids(jobs) or []
    if len(ids) > MAX_LIST:
        raise Invalid(f"jobs: at most {MAX_LIST} ids per request")
    found = plane.steps_of(principal, ids)
    return JSONResponse({"items": {str(k): v for k, v in found.items()}})


@router.get("/jobs/{job_id}/log", response_class=Response)
def job_log(
    plane: Plane,
    principal: Caller,
    job_id: JobId,
    stream: Literal["stdout", "stderr"] = "stdout",
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_LOG_CHUNK)] = 1 << 20,
) -> Response:
    """Bytes ``offset..offset+limit`` of the job's output.

    ``X-Phalanx-Offset`` is where the next read starts; ``X-Phalanx-Finished``
    is ``true`` once the job has finished and everything was read.
    """
    row = plane.job(principal, job_id)
    stdout, stderr = plane.output_paths(row)
    path = stdout if stream == "stdout" else stderr
    if path is None:
        raise NotFound(
            f"job {job_id} has no separate standard error: it goes to the output file "
            "(submit with --error FILE to split it)"
        )
    try:
        # A job that runs as its user's account: only a regular file of that account.
        data, _, size = read_output(path, plane.output_owner(row), offset, limit)
    except ForeignOutput:
        raise Forbidden(
            f"job {job_id}'s {stream} ({path}) is not a file of the job's account "
            f"({row.user}): read it on the machine"
        ) from None
    except OSError as exc:
        raise Invalid(f"job {job_id}'s {stream} ({path}) cannot be read: {exc.strerror}") from None
    next_offset = offset + len(data)
    finished = JobState(row.state).finished and next_offset >= size
    return Response(
        content=data,
        media_type="text/plain; charset=utf-8",
        headers={
            "X-Phalanx-Offset": str(next_offset),
            "X-Phalanx-Finished": "true" if finished else "false",
        },
    )
