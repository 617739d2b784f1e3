"""The README's dashboard pictures: a busy example cluster, photographed in Chromium.

Starts phalanx on the example cluster in a temporary state directory, has
team-a borrow from team-b and both queue more than fits, then signs in to the
dashboard in headless Chromium (Debian's, through Playwright) and saves the
overview, queues, jobs and nodes pages to ``docs/img/dashboard-*.png``.
Needs ``make test-deps`` (Chromium) and the test extras (Playwright).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.api.server import job, running_cluster  # noqa: E402

OUT = ROOT / "docs" / "img"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def busy(seconds: int, gpus: int, name: str) -> dict[str, object]:
    return job(
        ["bash", "-c", f"echo {name} starts; sleep {seconds}"],
        name=name,
        requests={"cpu": "4", "nvidia.com/gpu": str(gpus)},
    )


def main() -> int:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with running_cluster(Path(tempfile.mkdtemp(prefix="phalanx-shots-"))) as cluster:
        with cluster.alice as alice, cluster.bob as bob:
            for i in range(3):
                alice.submit(busy(900, 8, f"llama-sft-{i}"))
            bob.submit(busy(900, 8, "vit-pretrain"))
            for i in range(4):
                alice.submit(busy(600, 2, f"eval-{i}"))
            for i in range(2):
                bob.submit(busy(900, 8, f"sweep-{i}"))
            alice.submit(busy(900, 16, "llama-70b-ft"))
        time.sleep(4)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(cluster.url + "/login")
            page.get_by_label("Token").fill(cluster.admin_token)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(cluster.url + "/")
            for path, name in (
                ("/", "overview"),
                ("/queues", "queues"),
                ("/jobs", "jobs"),
                ("/nodes", "nodes"),
            ):
                page.goto(cluster.url + path)
                page.screenshot(path=str(OUT / f"dashboard-{name}.png"), full_page=True)
            browser.close()
    print(f"wrote {OUT}/dashboard-{{overview,queues,jobs,nodes}}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
