"""The REST API: FastAPI app over the control plane, and the uvicorn server that runs it."""

from __future__ import annotations

from phalanx.api.app import create_app

__all__ = ["create_app"]
