"""The Nodes page of a real server: a drained node's state, reason, who and when."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.api.server import running_cluster


def test_the_nodes_page_shows_why_a_node_is_drained(tmp_path: Path) -> None:
    with running_cluster(tmp_path / "state") as cluster:
        with cluster.admin as client:
            client.update_nodes(["gpu-h100-2"], "drain", "fan <failing>")
            client.update_nodes(["gpu-l40s-1"], "down", "psu")
        with httpx.Client(base_url=cluster.url, follow_redirects=True) as web:
            web.post("/login", data={"token": cluster.admin_token, "next": "/nodes"})
            page = web.get("/nodes")
    assert page.status_code == 200
    html = page.text
    assert 'class="node state-drain"' in html and 'class="node state-down"' in html
    table = html[html.index("Drained and down nodes") :]
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td>", table)
    assert rows == [
        ("gpu-h100-2", "drain", "fan &lt;failing&gt;", "admin"),
        ("gpu-l40s-1", "down", "psu", "admin"),
    ]
    assert re.search(r"<td>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d</td></tr>", table)
