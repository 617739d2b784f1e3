"""The Ray runtime's pure parts: Ray nodes as phalanx Nodes, bundles, addresses (no Ray)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.control.configs import keep_node_state
from phalanx.errors import Invalid
from phalanx.model.node import AdminState
from phalanx.runtime.ray.connect import connect, is_loopback
from phalanx.runtime.ray.inventory import Inventory, died
from phalanx.runtime.ray.runtime import bundle_resources
from phalanx.server import start_server


def entry(node_id: str, *, alive: bool = True, host: str = "m1", **labels: str) -> dict[str, Any]:
    return {
        "NodeID": node_id,
        "Alive": alive,
        "NodeManagerAddress": "10.0.0.1",
        "NodeManagerHostname": host,
        "Resources": {
            "CPU": 96.0,
            "GPU": 8.0,
            "memory": 1024.0**4,
            "object_store_memory": 1e9,
            f"node:10.0.0.{node_id[-1]}": 1.0,
            "accelerator_type:H100": 1.0,
            "infiniband": 4.0,
        },
        "Labels": {"ray.io/node-id": node_id, **labels},
    }


def test_a_ray_node_becomes_a_node_with_its_resources_and_labels() -> None:
    [node] = Inventory().update([entry("a" * 56, **{"phalanx.io/node": "gpu1", "rack": "r1"})])
    assert node.name == "gpu1"
    assert node.capacity == {
        "cpu": 96000,
        "nvidia.com/gpu": 8,
        "memory": 1024**4,
        "infiniband": 4,
    }
    assert node.labels == {
        "phalanx.io/node": "gpu1",
        "rack": "r1",
        "kubernetes.io/hostname": "gpu1",
        "nvidia.com/gpu.product": "H100",
    }
    assert node.state == AdminState.UP


def test_names_come_from_the_label_else_the_host_else_host_and_id() -> None:
    inv = Inventory()
    nodes = inv.update(
        [
            entry("11111111aaaa", host="m1"),
            entry("22222222bbbb", host="m2"),
            entry("33333333cccc", host="m2"),
            entry("44444444dddd", host="m2", **{"phalanx.io/node": "named"}),
        ]
    )
    assert sorted(n.name for n in nodes) == ["m1", "m2-22222222", "m2-33333333", "named"]


def test_only_changes_are_reported_and_a_dead_node_turns_down_then_up_again() -> None:
    inv = Inventory()
    first = entry("1" * 8, **{"phalanx.io/node": "gpu1"})
    assert len(inv.update([first])) == 1
    assert inv.update([first]) == []
    [down] = inv.update([{**first, "Alive": False}])
    assert (down.name, down.state, down.reason) == (
        "gpu1",
        AdminState.DOWN,
        "Ray node 11111111 died",
    )
    assert down.capacity["nvidia.com/gpu"] == 8
    assert inv.update([{**first, "Alive": False}]) == []
    # The machine comes back as a new Ray node with the same label: the same Node, up.
    again = entry("2" * 8, **{"phalanx.io/node": "gpu1"})
    [up] = inv.update([{**first, "Alive": False}, again])
    assert (up.name, up.state) == ("gpu1", AdminState.UP)
    assert inv.node_id("gpu1") == "2" * 8


def test_an_operators_drain_outlives_the_inventory_but_its_own_down_does_not() -> None:
    inv = Inventory()
    first = entry("1" * 8, **{"phalanx.io/node": "gpu1"})
    [up] = inv.update([first])
    drained = {"state": "drain", "reason": "bad fan", "reasonUser": "root", "reasonTime": 5.0}
    kept = keep_node_state(up, drained, died)
    assert (kept.state, kept.reason, kept.reason_user) == (AdminState.DRAIN, "bad fan", "root")
    assert kept.capacity == up.capacity
    # A health check's down is kept too; the inventory's own (the Ray node died) is not.
    health = {"state": "down", "reason": "gpu lost", "healthCheckReason": "gpu lost"}
    assert keep_node_state(up, health, died).state is AdminState.DOWN
    [dead] = inv.update([{**first, "Alive": False}])
    spec = dead.to_dict()
    assert died(spec) and not died(drained) and not died(health)
    assert keep_node_state(up, spec, died) is up
    assert keep_node_state(up, None, died) is up


def test_bundles_ask_ray_for_what_the_tasks_request() -> None:
    offered = ["CPU", "GPU", "memory", "infiniband"]
    requests = {"cpu": 1500, "nvidia.com/gpu": 8, "memory": 2**30, "infiniband": 1, "pods": 1}
    assert bundle_resources(requests, 2, offered) == {
        "CPU": 3.0,
        "GPU": 16.0,
        "memory": 2.0 * 2**30,
        "infiniband": 2.0,
    }
    assert bundle_resources({"phalanx.io/gpu-milli": 500}, 1, offered) == {"GPU": 0.5}
    assert bundle_resources({}, 1, offered) == {"CPU": 0.01}


def test_an_address_where_nothing_answers_is_one_clear_error() -> None:
    with pytest.raises(Invalid, match=r"no Ray cluster answers at 127\.0\.0\.1:1"):
        connect("127.0.0.1:1")
    with pytest.raises(Invalid, match="expected HOST:PORT"):
        connect("nowhere")
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("10.0.0.1")


def test_up_with_the_ray_runtime_needs_an_address(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(Invalid, match="--ray-address HOST:PORT"):
        start_server(tmp_path, port=0, runtime="ray")
    with pytest.raises(Invalid, match="no Ray cluster answers"):
        start_server(tmp_path, port=0, runtime="ray", ray_address="127.0.0.1:1")
