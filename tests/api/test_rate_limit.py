"""Request-rate limits per token: a bucket each, 429 with Retry-After past it."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from phalanx.api.ratelimit import RateLimit, RateLimiter
from phalanx.errors import Invalid
from tests.api.server import CLUSTER


def test_a_bucket_refills_at_its_rate() -> None:
    now = [100.0]
    limiter = RateLimiter(RateLimit(rate=2.0, burst=3.0), clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)
    assert limiter.take("b") == 0.0  # every caller has its own
    now[0] += 0.5
    assert limiter.take("a") == 0.0
    assert limiter.take("a") > 0
    now[0] += 60
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]  # never past the burst


@pytest.mark.parametrize("text", ["", "0", "-1", "x", "5:0", "nan", "inf", "5:x"])
def test_a_bad_limit_is_one_clear_error(text: str) -> None:
    with pytest.raises(Invalid, match=r"--rate-limit: expected RATE\[:BURST\]"):
        RateLimit.parse(text)
    assert RateLimit.parse("200") == RateLimit(200.0, 400.0)
    assert RateLimit.parse("10:15") == RateLimit(10.0, 15.0)


def test_a_server_answers_429_past_a_tokens_limit(tmp_path: Path) -> None:
    from phalanx.server import start_server

    server = start_server(tmp_path, port=0, configs=[CLUSTER], rate_limit="2:5")
    try:
        admin = {"Authorization": f"Bearer {server.admin_token}"}
        with httpx.Client(base_url=server.url, timeout=30) as h:
            other = h.post(
                "/api/v1/tokens", json={"user": "alice", "tenants": ["team-a"]}, headers=admin
            ).json()["token"]
            codes = [h.get("/api/v1/whoami", headers=admin).status_code for _ in range(8)]
            assert codes[:4] == [200] * 4 and codes[-1] == 429
            refused = h.get("/api/v1/whoami", headers=admin)
            assert refused.status_code == 429
            assert refused.json()["error"] == "TooManyRequests"
            assert int(refused.headers["Retry-After"]) >= 1
            assert h.get("/healthz").status_code == 200  # never limited
            alice = {"Authorization": f"Bearer {other}"}
            assert h.get("/api/v1/whoami", headers=alice).status_code == 200
            time.sleep(1.1)
            assert h.get("/api/v1/whoami", headers=admin).status_code == 200
    finally:
        server.stop()
