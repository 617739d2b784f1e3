"""Adopt: rebuilding an engine from recorded admissions (recovery after a restart).

An engine rebuilt from configuration, the admitted jobs' recorded admissions
(``Adopt``) and the pending jobs (``Submit``) holds exactly the quota and node
capacity the original held, and from there admits nothing that over-commits.
"""

from __future__ import annotations

import pytest

from phalanx.engine import Admit, Adopt, Engine, EngineConfig, Expedite, Finish, Submit
from phalanx.engine.expedite import EXPEDITE_HOLD_S
from tests.engine.test_snapshot import _config_id, _configs, _driver, _fresh


def _holdings(engine: Engine) -> tuple[dict[str, dict[str, int]], dict[str, dict[object, int]]]:
    nodes = {
        name: {r: v for r, v in slot.used.items() if v} for name, slot in engine.cache.nodes.items()
    }
    queues = {
        name: {fr: v for fr, v in info.node.usage.items() if v}
        for name, info in engine.cache.cluster_queues.items()
    }
    return nodes, queues


def _rebuild(config: EngineConfig, original: Engine) -> Engine:
    engine = _fresh(config)
    for job_id in sorted(original.jobs):
        rec = original.jobs[job_id]
        if rec.admission is not None:
            engine.apply(Adopt(rec.job, rec.admission.decision))
        else:
            engine.apply(Submit(rec.job))
    # Expedited jobs holding nodes are expedited again, as recovery does from their
    # Requeued events (admissions alone do not carry their holds).
    for job_id, hold in sorted(original.expedite.jobs.items()):
        if hold.held and hold.until is not None:
            engine.apply(Expedite(job_id, hold.nodes, hold.until - EXPEDITE_HOLD_S))
    return engine


@pytest.mark.parametrize("config", _configs(), ids=_config_id)
@pytest.mark.parametrize("seed", [4, 5])
def test_adopted_engine_holds_what_the_original_held(config: EngineConfig, seed: int) -> None:
    original = _fresh(config)
    drive = _driver(seed, first_id=1)
    for step in range(40):
        drive(original, 1000.0 + step)
    assert any(r.admission is not None for r in original.jobs.values())

    rebuilt = _rebuild(config, original)
    assert _holdings(rebuilt) == _holdings(original)
    assert {j for j, r in rebuilt.jobs.items() if r.admission} == {
        j for j, r in original.jobs.items() if r.admission
    }

    # Going on, the rebuilt engine never over-commits a node, and releases exactly.
    for step in range(20):
        for decision in drive(rebuilt, 2000.0 + step):
            if isinstance(decision, Admit):
                for slot in rebuilt.cache.nodes.values():
                    for resource, used in slot.used.items():
                        assert used <= slot.capacity.get(resource, 0)
    for job_id in sorted(rebuilt.jobs):
        rebuilt.apply(Finish(job_id))
    nodes, queues = _holdings(rebuilt)
    assert all(not used for used in nodes.values())
    assert all(not used for used in queues.values())
