"""The dashboard in a real browser: headless Chromium (Debian's) driven by Playwright
against a real server, signing in with tokens, watching a job live, reading its output,
cancelling it, and another tenant's user neither seeing nor cancelling it.

Screenshots of every page go to ``build/artifacts/dashboard/`` (or
``$PHALANX_ARTIFACTS/dashboard``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.server import Cluster, job, running_cluster
from tests.needs import require

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("PHALANX_ARTIFACTS", ROOT / "build" / "artifacts")) / "dashboard"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 20_000

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    state = tmp_path_factory.mktemp("state")
    _write_report(state / "reports" / "philly-demo")
    with running_cluster(state) as running:
        yield running


def _write_report(out: Path) -> None:
    from phalanx.sim.run import simulate

    trace = out.parent / "trace.csv"
    trace.parent.mkdir(parents=True, exist_ok=True)
    rows = [f"{i * 600},{1800 + 300 * (i % 5)},{(1, 2, 4, 8)[i % 4]},t{i % 3}" for i in range(40)]
    trace.write_text("submit,duration,gpus,tenant\n" + "\n".join(rows) + "\n")
    simulate(str(trace), "shared:2", ["phalanx", "kueue"], out)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require(Path(CHROMIUM).exists(), "chromium (Debian's package)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield launched
        launched.close()


def _sign_in(browser: Any, cluster: Cluster, token: str) -> Any:
    page = browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(cluster.url + "/")
    assert "/login" in page.url
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/$"))
    return page


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _ticker(seconds: int, gpus: int = 0) -> dict[str, object]:
    fields: dict[str, object] = {}
    if gpus:
        fields["requests"] = {"cpu": "1", "nvidia.com/gpu": str(gpus)}
    return job(
        ["bash", "-c", f"for i in $(seq 1 {seconds}); do echo tick $i; sleep 1; done"],
        name="ticker",
        **fields,
    )


def test_a_bad_token_is_refused_and_pages_need_a_session(browser: Any, cluster: Cluster) -> None:
    page = browser.new_context().new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(cluster.url + "/jobs")
    assert "/login" in page.url
    page.get_by_label("Token").fill("phx_not-a-token")
    page.get_by_role("button", name="Sign in").click()
    assert page.get_by_role("alert").inner_text().startswith("That token is not valid")
    with httpx.Client(base_url=cluster.url) as h:
        assert h.get("/ui/jobs/rows").status_code == 303
        assert h.get("/ui/jobs/1/log").status_code == 401
        # An open redirect is not possible through the sign-in form's target.
        r = h.post("/login", data={"token": cluster.alice_token, "next": "//evil.example/"})
        assert r.headers["location"] == "/"


def test_a_job_appears_runs_shows_its_output_and_is_cancelled(
    browser: Any, cluster: Cluster
) -> None:
    page = _sign_in(browser, cluster, cluster.alice_token)
    assert "alice" in page.get_by_test_id("whoami").inner_text()
    with cluster.alice as alice:
        alice.submit(_ticker(600, gpus=8))  # keeps the overview busy for the screenshots
    page.goto(cluster.url + "/jobs")
    with cluster.alice as alice:
        job_id = alice.submit(_ticker(600))
    # The table refreshes itself: the new job appears, then runs, without a reload.
    state = page.get_by_test_id(f"state-{job_id}")
    state.wait_for()
    page.wait_for_function(
        f"document.querySelector('[data-testid=\"state-{job_id}\"]').textContent === 'RUNNING'"
    )
    _shot(page, "jobs")
    page.get_by_role("link", name=str(job_id), exact=True).click()
    page.wait_for_url(re.compile(rf"/jobs/{job_id}$"))
    page.wait_for_function("document.querySelector('#log').textContent.includes('tick 2')")
    assert page.get_by_test_id("job-state").inner_text() == "RUNNING"
    assert "gpu-" in page.locator("section", has_text="Placement").inner_text()
    page.get_by_text("variables").click()  # the environment, folded
    assert f"PHALANX_JOB_ID\t{job_id}" in page.locator("table.env").inner_text()
    _shot(page, "job")
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel job").click()
    page.wait_for_function(
        "document.querySelector('[data-testid=\"job-state\"]').textContent === 'CANCELLED'"
    )
    with cluster.alice as alice:
        assert alice.get(job_id)["state"] == "CANCELLED"
    for path, name in [
        ("/", "overview"),
        ("/queues", "queues"),
        ("/nodes", "nodes"),
        ("/tenants", "tenants"),
        ("/reports", "reports"),
    ]:
        page.goto(cluster.url + path)
        page.get_by_role("heading", level=1).wait_for()
        _shot(page, name)
    page.goto(cluster.url + "/")
    assert int(page.get_by_test_id("running").inner_text()) >= 1
    page.goto(cluster.url + "/reports/philly-demo")
    assert page.get_by_role("row", name=re.compile("^phalanx")).count() == 1
    page.wait_for_function(
        "[...document.images].length > 0 && [...document.images].every(i => i.naturalWidth > 0)"
    )
    _shot(page, "report")


def test_another_tenants_user_can_neither_see_nor_cancel_a_job(
    browser: Any, cluster: Cluster
) -> None:
    with cluster.alice as alice:
        job_id = alice.submit(_ticker(600))
    page = _sign_in(browser, cluster, cluster.bob_token)
    page.goto(cluster.url + "/jobs")
    page.get_by_test_id("job-count").wait_for()
    assert page.get_by_test_id(f"state-{job_id}").count() == 0
    assert "team-a" not in page.locator("table.jobs tbody").inner_text()
    page.goto(cluster.url + f"/jobs/{job_id}")
    assert page.get_by_role("heading", level=1).inner_text() == "Not found"
    # Even a hand-made cancel request with bob's own valid CSRF token is refused.
    page.goto(cluster.url + "/jobs")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    response = page.request.post(
        cluster.url + f"/jobs/{job_id}/cancel", form={"csrf": csrf}, max_redirects=0
    )
    assert response.status == 404
    log = page.request.get(cluster.url + f"/ui/jobs/{job_id}/log")
    assert log.status == 404
    with cluster.alice as alice:
        assert alice.get(job_id)["state"] in ("PENDING", "RUNNING")
        alice.cancel(job_id)


def test_a_cancel_without_the_csrf_token_is_refused(browser: Any, cluster: Cluster) -> None:
    with cluster.alice as alice:
        job_id = alice.submit(_ticker(600))
    page = _sign_in(browser, cluster, cluster.alice_token)
    response = page.request.post(
        cluster.url + f"/jobs/{job_id}/cancel", form={"csrf": "forged"}, max_redirects=0
    )
    assert response.status == 403
    with cluster.alice as alice:
        assert alice.get(job_id)["state"] in ("PENDING", "RUNNING")
        alice.cancel(job_id)
