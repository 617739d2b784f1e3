"""Request-rate limits per caller: a token bucket per bearer token (or dashboard session).

Slurm's ``SlurmctldParameters=rl_enable`` in phalanx's terms: each caller has a
bucket of ``burst`` requests, refilled at ``rate`` per second; a request that
finds it empty is answered ``429 Too Many Requests`` with ``Retry-After``, before
it reaches the control plane, so one runaway client cannot starve the others
or the scheduler. ``/healthz`` is never limited; requests without credentials
share one bucket (they are refused anyway, cheaply). Off unless configured
(``phalanx up --rate-limit RATE[:BURST]``), as in Slurm.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from phalanx.errors import Invalid

__all__ = ["RateLimit", "RateLimiter"]

MAX_CALLERS = 100_000
"""Buckets kept; past this the fullest (idle) ones are dropped."""


@dataclass(frozen=True, slots=True)
class RateLimit:
    rate: float
    """Requests per second a caller gets back."""
    burst: float
    """Requests a caller may make at once."""

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """``RATE`` or ``RATE:BURST`` (``200`` or ``200:400``); BURST defaults to 2 x RATE."""
        rate_text, _, burst_text = text.partition(":")
        try:
            rate = float(rate_text)
            burst = float(burst_text) if burst_text else 2 * rate
        except ValueError:
            rate = burst = -1.0
        if not (math.isfinite(rate) and math.isfinite(burst) and rate > 0 and burst >= 1):
            raise Invalid(
                f"--rate-limit: expected RATE[:BURST] (requests per second per token, and how "
                f"many at once; e.g. 200 or 200:400), got {text!r}"
            )
        return cls(rate, burst)


class RateLimiter:
    """The buckets, and the middleware that spends them."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        """Caller key -> (tokens left, when last refilled)."""

    def take(self, key: str) -> float:
        """Spend one request of ``key``'s bucket: 0.0 if allowed, else the seconds until
        one is back."""
        now = self.clock()
        tokens, then = self._buckets.get(key, (self.limit.burst, now))
        tokens = min(self.limit.burst, tokens + (now - then) * self.limit.rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            if len(self._buckets) > MAX_CALLERS:
                self._forget_idle()
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.limit.rate

    def _forget_idle(self) -> None:
        full = sorted(self._buckets.items(), key=lambda kv: -kv[1][0])
        for key, _ in full[: len(full) // 2]:
            del self._buckets[key]

    async def __call__(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if request.url.path == "/healthz":
            return await call_next(request)
        wait = self.take(_caller(request))
        if wait > 0:
            return JSONResponse(
                {
                    "error": "TooManyRequests",
                    "detail": f"request rate over this server's limit of {self.limit.rate:g}/s "
                    f"per token (bursts of {self.limit.burst:g}): retry in {wait:.2f} s",
                },
                status_code=429,
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
        return await call_next(request)


def _caller(request: Request) -> str:
    header = request.headers.get("authorization", "")
    credential = header.partition(" ")[2].strip() or request.cookies.get("phalanx_session", "")
    if not credential:
        return "anonymous"
    return hashlib.sha256(credential.encode()).hexdigest()[:32]
