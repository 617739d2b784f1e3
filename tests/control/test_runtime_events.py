"""The nodes an expedited job's restart holds: its nodes that are up, less the lost ones."""

from __future__ import annotations

from pathlib import Path

from phalanx.control.charging import Charging
from phalanx.control.metrics import Metrics
from phalanx.control.runtime_events import RuntimeEvents
from phalanx.control.state import LoopState
from phalanx.engine import EngineConfig
from phalanx.model import AdminState, Node
from phalanx.runtime.noop import NoopRuntime
from phalanx.store import Store


def test_the_lost_nodes_a_runtime_names_are_not_held_while_still_up(tmp_path: Path) -> None:
    state = LoopState(EngineConfig())
    store = Store.open(state_dir=tmp_path)
    try:
        events = RuntimeEvents(state, NoopRuntime(tmp_path), Metrics(), Charging(state, store))
        for name in ("n1", "n2", "n3"):
            node = Node(name=name, capacity={"nvidia.com/gpu": 8, "cpu": 4})
            state.put_object("Node", name, node)
        down = Node(name="n3", capacity={"nvidia.com/gpu": 8, "cpu": 4}, state=AdminState.DOWN)
        state.put_object("Node", "n3", down)
        # n2 is lost (the Ray runtime says so) before the inventory has it down.
        assert events._healthy(["n1", "n2", "n3"], ("n2",)) == ("n1",)
        assert events._healthy(["n1", "n2", "n3"]) == ("n1", "n2")
    finally:
        store.close()
