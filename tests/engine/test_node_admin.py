"""Drained and down nodes in the engine: never new work, and the states sinfo shows.

A property test drives random submissions, finishes and drain / down / resume
changes of the nodes through the engine, and checks after every cycle that no
job was placed on a node that was not up when it was placed, that a drained
node with jobs is ``draining`` and one without ``drain``, and that the reason
fields of the Node (who drained it and when) do not change what is decided.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phalanx.engine import Engine, Finish, Submit, Upsert
from phalanx.model import AdminState, NodeState
from tests.engine.helpers import (
    admits,
    cluster_queue,
    decisions_json,
    engine_with,
    flavor,
    job,
    make_node,
    step,
)

NODES = ("n0", "n1", "n2")

Action = tuple[str, Any]

actions_st = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.tuples(st.integers(1, 8), st.integers(1, 3))),
        st.tuples(st.just("finish"), st.integers(0, 30)),
        st.tuples(
            st.just("node"), st.tuples(st.sampled_from(NODES), st.sampled_from(list(AdminState)))
        ),
    ),
    min_size=1,
    max_size=40,
)


def _engine() -> Engine:
    return engine_with(
        flavor("f"), *(make_node(n) for n in NODES), cluster_queue("cq", {"f": 1024})
    )


def _run(actions: list[Action], *, stamped: bool) -> tuple[Engine, list[str]]:
    engine = _engine()
    states = dict.fromkeys(NODES, AdminState.UP)
    running: dict[int, list[str]] = {}
    log: list[str] = []
    next_id = 1
    for now, (kind, arg) in enumerate(actions, start=1):
        events: list[Any] = []
        if kind == "submit":
            gpus, count = arg
            events.append(Submit(job("cq", gpus=gpus, count=count, id=next_id)))
            next_id += 1
        elif kind == "finish":
            ids = sorted(running)
            if ids:
                events.append(Finish(ids[arg % len(ids)]))
        else:
            name, state = arg
            states[name] = state
            node = make_node(name, state=state.value)
            if stamped and state is not AdminState.UP:
                node = node.model_copy(
                    update={"reason": "maint", "reason_user": "root", "reason_time": float(now)}
                )
            events.append(Upsert(node))
        for event in events:
            if isinstance(event, Finish):
                running.pop(event.job_id, None)
        out = step(engine, float(now), *events)
        log.append(decisions_json(out))
        for job_id, admit in admits(out).items():
            placed = [n.node for ps in admit.pod_sets for n in ps.nodes]
            for name in placed:
                assert states[name] is AdminState.UP, (job_id, name, states[name])
            running[job_id] = placed
        for name in NODES:
            slot = engine.cache.nodes[name]
            shown = engine.node_state(name)
            if states[name] is AdminState.DRAIN:
                expected = NodeState.DRAINING if slot.jobs else NodeState.DRAIN
                assert shown is expected
            elif states[name] is AdminState.DOWN:
                assert shown is NodeState.DOWN
            else:
                assert shown in (NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED)
            assert slot.usage_state() in (NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED)
    return engine, log


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions_st)
def test_drained_and_down_nodes_never_receive_new_work(actions: list[Action]) -> None:
    _run(actions, stamped=False)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions_st)
def test_who_drained_a_node_and_when_does_not_change_decisions(actions: list[Action]) -> None:
    _, plain = _run(actions, stamped=False)
    _, stamped = _run(actions, stamped=True)
    assert plain == stamped


def test_a_resumed_node_takes_work_again() -> None:
    engine = _engine()
    for name in NODES:
        engine.apply(Upsert(make_node(name, state="drain")))
    out = step(engine, 1.0, Submit(job("cq", gpus=8, id=1)))
    assert not admits(out)
    out = step(engine, 2.0, Upsert(make_node("n1")))
    assert [n.node for n in admits(out)[1].pod_sets[0].nodes] == ["n1"]
    assert engine.node_state("n1") is NodeState.MIXED  # all GPUs, not all CPUs
    assert engine.node_state("n0") is NodeState.DRAIN
