"""The FastAPI app: REST under ``/api/v1``, ``/healthz``, ``/metrics``, OpenAPI at ``/docs``,
and the dashboard (:mod:`phalanx.web`) at ``/``.

Routes are plain ``def`` functions: FastAPI runs them in its threadpool and
the control plane's methods are thread-safe and block until a command is
durable. Every route but ``/healthz`` and the docs (``/docs``, ``/openapi.json``:
no data) needs a bearer token; ``/metrics`` too, unless the app is made with
``public_metrics``. The dashboard's pages need its session cookie instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from phalanx import __version__
from phalanx.api import jobs, kube, objects, priority, usage
from phalanx.api.deps import Plane, get_principal
from phalanx.api.errors import document_errors, install_error_handlers
from phalanx.api.fastsubmit import FastSubmit
from phalanx.api.forward import Forwarding
from phalanx.api.plane import ControlPlane
from phalanx.api.ratelimit import RateLimit, RateLimiter

__all__ = ["create_app"]


def create_app(
    plane: ControlPlane,
    *,
    reports_dir: Path | None = None,
    public_metrics: bool = False,
    rate_limit: RateLimit | None = None,
    own_url: str = "",
    kube_app: Any = None,
) -> FastAPI:
    """The API of ``plane``, and the dashboard at ``/`` (``reports_dir``: where it finds
    ``phalanx sim`` results). ``public_metrics``: ``/metrics`` answers without a token.
    ``rate_limit``: each token's requests per second (:mod:`phalanx.api.ratelimit`).
    Request bodies are bounded, and a standby forwards to the leader what needs it
    (:mod:`phalanx.api.forward`; ``own_url``: this server's URL, for the leader's log).
    ``kube_app``: the Kubernetes API (:mod:`phalanx.kubeapi`), also served under
    ``/kube``, where a standby's Kubernetes API forwards what needs the leader."""
    app = FastAPI(
        title="phalanx",
        version=__version__,
        description="GPU workload orchestrator: Slurm and Kueue dialects, one admission engine.",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.plane = plane
    app.state.public_metrics = public_metrics
    install_error_handlers(app)
    # Innermost of the middleware: rate limits and forwarding apply to it too.
    app.add_middleware(FastSubmit, plane=lambda: app.state.plane)
    if rate_limit is not None:
        app.middleware("http")(RateLimiter(rate_limit))
    # Added last, so outermost: bodies are bounded before anything reads them.
    app.add_middleware(Forwarding, own_url=own_url)

    @app.get("/healthz", tags=["health"])
    def healthz(plane: Plane) -> Response:
        """200 once the server accepts work, 503 before (recovering) and while stopping.

        ``role`` is ``leader`` (it schedules) or ``standby`` (several servers on one
        PostgreSQL: it serves reads and forwards the rest to ``leader``)."""
        if plane.ready:
            leading = plane.leading
            body: dict[str, Any] = {"status": "ok", "role": "leader" if leading else "standby"}
            if not leading:
                body["leader"] = plane.leader_url
            return JSONResponse(body)
        return JSONResponse({"status": "starting"}, status_code=503)

    @app.get("/metrics", tags=["health"], response_class=Response)
    def metrics(request: Request, plane: Plane) -> Response:
        """Prometheus text exposition (Kueue's metric names where Kueue has one); needs a
        token unless the server runs with ``--public-metrics``."""
        from prometheus_client import CONTENT_TYPE_LATEST

        if not request.app.state.public_metrics:
            get_principal(request)

        return Response(plane.render_metrics(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(jobs.router)
    app.include_router(usage.router)
    app.include_router(priority.router)
    # Before the objects' catch-all /{plural}: workloads and Kubernetes job kinds.
    app.include_router(kube.router)
    app.include_router(objects.router)
    if kube_app is not None:
        app.mount("/kube", kube_app)
    from phalanx import web

    web.install(app, reports_dir)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            spec = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = document_errors(spec)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
