"""The dashboard's pages and the fragments that keep them live, served at ``/``.

Pages are rendered on the server (Jinja2); a small script
(``static/app.js``) refreshes the parts that change by polling fragments of
the same pages: the jobs table, a job's state and timeline, its output tail.
Every route needs a signed-in session (:mod:`phalanx.web.session`), and job
data passes through the control plane's tenant checks, as in the API. Each
response carries a ``Server-Timing`` header with the time the server spent on
it.
"""

from __future__ import annotations

import errno
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from phalanx import __version__
from phalanx.api.output import ForeignOutput, read_output
from phalanx.auth import Principal
from phalanx.errors import Forbidden, Invalid, NotFound, PhalanxError, Unauthorized
from phalanx.model import JobState
from phalanx.store.store import SORT_COLUMNS
from phalanx.web import data
from phalanx.web.session import csrf_ok, csrf_token, principal_of, sign_in, sign_out, token_of

__all__ = ["router", "templates"]

HERE = Path(__file__).parent
MAX_LOG_TAIL = 64 << 10

templates = Jinja2Templates(directory=str(HERE / "templates"))
router = APIRouter(include_in_schema=False)


def _time(value: float | None) -> str:
    if value is None:
        return "-"
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _spark_points(values: list[float], width: int = 360, height: int = 60) -> str:
    if not values:
        return ""
    step = width / max(1, len(values) - 1)
    return " ".join(
        f"{i * step:.1f},{height - 2 - v * (height - 4):.1f}" for i, v in enumerate(values)
    )


templates.env.filters["time"] = _time
templates.env.filters["duration"] = _duration
templates.env.filters["spark"] = _spark_points
templates.env.globals["version"] = __version__


def _now() -> float:
    return time.time()


class _Timer:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    def header(self) -> dict[str, str]:
        return {"Server-Timing": f"app;dur={(time.perf_counter() - self.started) * 1000:.1f}"}


def _login_redirect(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)


def _page(
    request: Request,
    template: str,
    build: Callable[[Principal], dict[str, Any]],
    *,
    nav: str,
) -> Response:
    timer = _Timer()
    principal = principal_of(request)
    if principal is None:
        return _login_redirect(request)
    try:
        context = build(principal)
    except NotFound as exc:
        return _error(request, principal, 404, str(exc))
    except (Invalid, Forbidden) as exc:
        return _error(request, principal, 400 if isinstance(exc, Invalid) else 403, str(exc))
    token = token_of(request) or ""
    context.update({"principal": principal, "nav": nav, "csrf": csrf_token(token), "now": _now()})
    response = templates.TemplateResponse(request, template, context)
    response.headers.update(timer.header())
    return response


def _error(request: Request, principal: Principal | None, status: int, message: str) -> Response:
    return templates.TemplateResponse(
        request,
        "error.html",
        {"principal": principal, "nav": "", "message": message, "status": status, "csrf": ""},
        status_code=status,
    )


def _plane(request: Request) -> Any:
    return request.app.state.plane


# --------------------------------------------------------------------------- sign-in


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/") -> Response:
    return templates.TemplateResponse(
        request, "login.html", {"principal": None, "nav": "", "next": _safe_next(next), "error": ""}
    )


def _safe_next(target: str) -> str:
    """Only paths on this server (no ``//host`` or scheme): no open redirect."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


@router.post("/login", response_class=HTMLResponse)
def login(
    request: Request, token: Annotated[str, Form()] = "", next: Annotated[str, Form()] = "/"
) -> Response:
    token = token.strip()
    try:
        _plane(request).authenticate(token)
    except (Unauthorized, Forbidden, NotFound, PhalanxError):
        return templates.TemplateResponse(
            request,
            "login.html",
            {
                "principal": None,
                "nav": "",
                "next": _safe_next(next),
                "error": "That token is not valid (revoked, expired or mistyped).",
            },
            status_code=401,
        )
    response = RedirectResponse(_safe_next(next), status_code=303)
    sign_in(request, response, token)
    return response


@router.post("/logout")
def logout(request: Request, csrf: Annotated[str, Form()] = "") -> Response:
    if not csrf_ok(request, csrf):
        return Response("bad or missing CSRF token", status_code=403)
    response = RedirectResponse("/login", status_code=303)
    sign_out(response)
    return response


# --------------------------------------------------------------------------- pages


@router.get("/", response_class=HTMLResponse)
def overview(request: Request) -> Response:
    plane = _plane(request)
    return _page(
        request, "overview.html", lambda p: {"o": data.overview(plane, p, _now())}, nav="overview"
    )


@router.get("/queues", response_class=HTMLResponse)
def queues(request: Request) -> Response:
    plane = _plane(request)
    return _page(request, "queues.html", lambda p: {"q": data.queues_page(plane)}, nav="queues")


@router.get("/nodes", response_class=HTMLResponse)
def nodes(request: Request) -> Response:
    plane = _plane(request)
    return _page(request, "nodes.html", lambda p: {"n": data.nodes_page(plane, p)}, nav="nodes")


@router.get("/tenants", response_class=HTMLResponse)
def tenants(request: Request) -> Response:
    plane = _plane(request)
    return _page(request, "tenants.html", lambda p: {"t": data.tenants_page(plane)}, nav="tenants")


@dataclass(frozen=True, slots=True)
class JobQuery:
    """The Jobs page's query string, as given (checked when the page is built, so a
    bad value is the page's error, not an API one)."""

    state: str = ""
    tenant: str = ""
    user: str = ""
    queue: str = ""
    q: str = ""
    sort: str = "id"
    desc: str = "1"
    page: Annotated[int, Query(ge=1, le=10**9)] = 1

    def filter(self) -> data.JobFilter:
        state = self.state.strip().upper()
        if state and state not in JobState.__members__:
            raise Invalid(f"state: unknown job state {state!r}")
        if self.sort not in SORT_COLUMNS:
            raise Invalid(f"sort: one of {', '.join(SORT_COLUMNS)}")
        return data.JobFilter(
            state=state,
            tenant=self.tenant.strip(),
            user=self.user.strip(),
            queue=self.queue.strip(),
            search=self.q.strip()[:200],
            sort=self.sort,
            desc=self.desc != "0",
            page=max(1, self.page),
        )


Jobs = Annotated[JobQuery, Depends()]


@router.get("/jobs", response_class=HTMLResponse)
def jobs(request: Request, query: Jobs) -> Response:
    plane = _plane(request)

    def build(principal: Principal) -> dict[str, Any]:
        flt = query.filter()
        return {
            "f": flt,
            "j": data.job_page(plane, principal, flt, _now()),
            "states": list(JobState.__members__),
            "tenants": sorted(principal.tenants)
            if not principal.admin
            else sorted({row.name for row in plane.store.objects("Tenant")}),
        }

    return _page(request, "jobs.html", build, nav="jobs")


@router.get("/ui/jobs/rows", response_class=HTMLResponse)
def job_rows(request: Request, query: Jobs) -> Response:
    """The jobs table's body and pager, for the page's live refresh."""
    plane = _plane(request)

    def build(principal: Principal) -> dict[str, Any]:
        flt = query.filter()
        return {"f": flt, "j": data.job_page(plane, principal, flt, _now())}

    return _page(request, "_job_rows.html", build, nav="jobs")


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job(request: Request, job_id: int) -> Response:
    plane = _plane(request)
    return _page(
        request,
        "job.html",
        lambda p: {"job": data.job_detail(plane, p, job_id, _now())},
        nav="jobs",
    )


@router.get("/ui/jobs/{job_id}/live", response_class=HTMLResponse)
def job_live(request: Request, job_id: int) -> Response:
    """The job page's state, explanation and timeline, for its live refresh."""
    plane = _plane(request)
    return _page(
        request,
        "_job_live.html",
        lambda p: {"job": data.job_detail(plane, p, job_id, _now())},
        nav="jobs",
    )


@router.get("/ui/jobs/{job_id}/log")
def job_log(
    request: Request,
    job_id: int,
    offset: Annotated[int, Query(ge=-1)] = -1,
) -> Response:
    """New output of the job from ``offset`` (``-1``: the last 64 KiB) as JSON:
    ``{"text", "offset", "finished"}``."""
    principal = principal_of(request)
    if principal is None:
        return JSONResponse({"error": "sign in"}, status_code=401)
    plane = _plane(request)
    try:
        row = plane.job(principal, job_id)
    except (NotFound, Forbidden):
        return JSONResponse({"error": f"no job {job_id}"}, status_code=404)
    path, _ = plane.output_paths(row)
    text, size, start = b"", 0, 0
    owner = plane.output_owner(row)
    # As the API's log: a job that runs as its user's account shows only a regular
    # file of that account, never what a last symlink points at.
    try:
        text, start, size = read_output(path, owner, offset, MAX_LOG_TAIL)
    except ForeignOutput:
        return JSONResponse(
            {"error": f"job {job_id}'s output is not a file of its account"}, status_code=403
        )
    except OSError as exc:
        if owner is not None and exc.errno == errno.ELOOP:
            return JSONResponse(
                {"error": f"job {job_id}'s output is a symbolic link: not shown"},
                status_code=403,
            )
    nxt = start + len(text)
    finished = JobState(row.state).finished and nxt >= size
    return JSONResponse(
        {"text": text.decode("utf-8", "replace"), "offset": nxt, "finished": finished}
    )


@router.post("/jobs/{job_id}/cancel")
def cancel(request: Request, job_id: int, csrf: Annotated[str, Form()] = "") -> Response:
    principal = principal_of(request)
    if principal is None:
        return _login_redirect(request)
    if not csrf_ok(request, csrf):
        return _error(request, principal, 403, "bad or missing CSRF token: reload the page")
    try:
        _plane(request).cancel(principal, job_id)
    except NotFound as exc:
        return _error(request, principal, 404, str(exc))
    except (Forbidden, Invalid) as exc:
        return _error(request, principal, 403 if isinstance(exc, Forbidden) else 400, str(exc))
    return RedirectResponse(f"/jobs/{job_id}", status_code=303)


# --------------------------------------------------------------------------- simulator reports


def _reports_dir(request: Request) -> Path | None:
    folder = getattr(request.app.state, "reports_dir", None)
    return None if folder is None else Path(folder)


def _reports(folder: Path | None) -> list[dict[str, Any]]:
    if folder is None or not folder.is_dir():
        return []
    found = []
    for summary in sorted(folder.glob("*/summary.json")):
        try:
            info = json.loads(summary.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        found.append(
            {
                "name": summary.parent.name,
                "trace": info.get("trace", ""),
                "cluster": info.get("cluster", ""),
                "jobs": info.get("jobs", 0),
                "policies": list(info.get("policies", {})),
            }
        )
    return found


@router.get("/reports", response_class=HTMLResponse)
def reports(request: Request) -> Response:
    folder = _reports_dir(request)
    return _page(
        request,
        "reports.html",
        lambda p: {"reports": _reports(folder), "folder": folder},
        nav="reports",
    )


def _report_path(folder: Path | None, name: str, file: str = "summary.json") -> Path:
    """``folder/name/file``, refusing anything that would leave ``folder``."""
    if folder is None:
        raise NotFound("no simulator reports here (start the server with --reports DIR)")
    base = folder.resolve()
    path = (base / name / file).resolve()
    if base not in path.parents or not path.is_file():
        raise NotFound(f"no report {name!r}")
    return path


@router.get("/reports/{name}", response_class=HTMLResponse)
def report(request: Request, name: str) -> Response:
    folder = _reports_dir(request)

    def build(principal: Principal) -> dict[str, Any]:
        summary = json.loads(_report_path(folder, name).read_text(encoding="utf-8"))
        plots = [
            p
            for p in ("utilization.png", "queue.png", "waits.png", "shares.png")
            if (_report_path(folder, name).parent / p).is_file()
        ]
        return {
            "name": name,
            "s": summary,
            "plots": plots,
            "hour": 3600.0,
            "isfinite": math.isfinite,
        }

    return _page(request, "report.html", build, nav="reports")


@router.get("/reports/{name}/{file}")
def report_file(request: Request, name: str, file: str) -> Response:
    principal = principal_of(request)
    if principal is None:
        return _login_redirect(request)
    if not file.endswith(".png"):
        return Response(status_code=404)
    try:
        path = _report_path(_reports_dir(request), name, file)
    except NotFound:
        return Response(status_code=404)
    return FileResponse(path, media_type="image/png")
