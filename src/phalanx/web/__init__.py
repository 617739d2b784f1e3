"""The web dashboard: the cluster, the queues and every job, served by the API server at ``/``.

:func:`install` adds the pages (:mod:`phalanx.web.routes`) and their static
files to the API's FastAPI app; sign-in uses the API's own tokens
(:mod:`phalanx.web.session`), and what a page shows comes from
:mod:`phalanx.web.data`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["install"]


def install(app: FastAPI, reports_dir: Path | None = None) -> None:
    """Serve the dashboard from ``app``; ``reports_dir`` holds ``phalanx sim`` results."""
    from fastapi.staticfiles import StaticFiles

    from phalanx.web.routes import HERE, router

    app.state.reports_dir = reports_dir
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(router)
