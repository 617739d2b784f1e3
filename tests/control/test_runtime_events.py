"""The nodes an expedited job's restart holds: its nodes that are up, less the lost ones."""

from __future__ import annotations

from phalanx.control.runtime_events import healthy_nodes
from phalanx.engine import Engine, EngineConfig, Upsert
from phalanx.model import AdminState, Node


def test_the_lost_nodes_a_runtime_names_are_not_held_while_still_up() -> None:
    engine = Engine(EngineConfig())
    for name in ("n1", "n2", "n3"):
        engine.apply(Upsert(Node(name=name, capacity={"nvidia.com/gpu": 8, "cpu": 4})))
    down = Node(name="n3", capacity={"nvidia.com/gpu": 8, "cpu": 4}, state=AdminState.DOWN)
    engine.apply(Upsert(down))
    # n2 is lost (the Ray runtime says so) before the inventory has it down.
    assert healthy_nodes(engine, ["n1", "n2", "n3"], ("n2",)) == ("n1",)
    assert healthy_nodes(engine, ["n1", "n2", "n3"]) == ("n1", "n2")
