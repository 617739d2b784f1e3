"""slurm.conf's priority and scheduler keys reach the engine's configuration, and a
partition's PriorityJobFactor and TRESBillingWeights its ClusterQueue."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.control.configs import read_configs
from phalanx.dialects.slurm import read_slurm_conf
from phalanx.dialects.slurm.scheduling import read_scheduling
from phalanx.engine import Engine, EngineConfig, Submit, TenantUsage, Upsert
from phalanx.engine.config import BackfillConfig, SlurmPriorityConfig, UsageConfig
from phalanx.errors import Invalid
from phalanx.model import ClusterQueue, Job, PodSet, Tenant

NODES = "NodeName=gpu[1-4] CPUs=64 RealMemory=512000 Gres=gpu:8\n"

CONF = """\
PriorityType=priority/multifactor
PriorityWeightAge=1000
PriorityWeightFairshare=10000
PriorityWeightJobSize=1000
PriorityWeightPartition=1000
PriorityWeightQOS=2000
PriorityWeightAssoc=5
PriorityWeightTRES=CPU=1000,GRES/gpu=3000
PriorityMaxAge=14-0
PriorityFavorSmall=YES
PriorityFlags=NO_FAIR_TREE,SMALL_RELATIVE_TO_TIME
PriorityDecayHalfLife=1-0
PriorityUsageResetPeriod=WEEKLY
PriorityCalcPeriod=2
SchedulerType=sched/backfill
SchedulerParameters=bf_window=2880,bf_resolution=120,bf_max_job_test=100,bf_job_part_count_reserve=3,bf_continue
"""


def test_every_scheduling_key_reaches_the_engine_config() -> None:
    settings = read_scheduling(CONF, "slurm.conf")
    assert settings == {
        "slurm_priority": SlurmPriorityConfig(
            weight_age=1000,
            weight_assoc=5,
            weight_fairshare=10000,
            weight_job_size=1000,
            weight_partition=1000,
            weight_qos=2000,
            weight_tres="CPU=1000,GRES/gpu=3000",
            max_age_s=14 * 86400.0,
            favor_small=True,
            flags=("NO_FAIR_TREE", "SMALL_RELATIVE_TO_TIME"),
        ),
        "usage": UsageConfig(half_life_s=86400.0, reset_period="WEEKLY", fair_tree=False),
        "priority_calc_period_s": 120.0,
        "backfill": BackfillConfig(
            window_s=2880 * 60.0, resolution_s=120.0, max_job_test=100, reservations_per_queue=3
        ),
    }
    config = EngineConfig.for_preset("slurm", **settings)
    assert config.slurm_priority.favor_small and not config.slurm_priority.fair_tree


def test_unset_weights_take_slurms_defaults_and_no_keys_change_nothing() -> None:
    priority = read_scheduling("PriorityWeightAge=10\n")["slurm_priority"]
    assert isinstance(priority, SlurmPriorityConfig)
    assert (priority.weight_age, priority.weight_fairshare, priority.weight_qos) == (10, 0, 0)
    assert read_scheduling(NODES + "PartitionName=p Nodes=ALL\n") == {}
    assert read_scheduling("SchedulerType=sched/builtin\n") == {"backfill": None}
    assert read_scheduling("SchedulerType=sched/backfill\n") == {"backfill": BackfillConfig()}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "PriorityWeightAge=lots\n",
            "slurm.conf:1: PriorityWeightAge=lots: expected a whole",
        ),
        ("\nPriorityType=priority/fancy\n", "slurm.conf:2: PriorityType=priority/fancy: "),
        ("PriorityFlags=DEPTH_OBLIVIOUS\n", "slurm.conf:1: PriorityFlags=DEPTH_OBLIVIOUS: "),
        (
            "PriorityFavorSmall=maybe\n",
            "slurm.conf:1: PriorityFavorSmall=maybe: expected YES",
        ),
        ("PriorityMaxAge=0\n", "slurm.conf:1: PriorityMaxAge=0: "),
        ("PriorityUsageResetPeriod=HOURLY\n", "slurm.conf:1: PriorityUsageResetPeriod=HOURLY: "),
        ("PriorityCalcPeriod=0\n", "slurm.conf:1: PriorityCalcPeriod=0: expected a positive time"),
        ("SchedulerType=sched/gang\n", "slurm.conf:1: SchedulerType=sched/gang: expected one of"),
        (
            "SchedulerParameters=bf_window=soon\n",
            "slurm.conf:1: SchedulerParameters bf_window=soon: expected a whole number",
        ),
        (
            "SchedulerParameters=bf_max_job_test=0\n",
            "slurm.conf:1: SchedulerParameters=bf_max_job_test=0: ",
        ),
    ],
)
def test_bad_values_name_file_line_and_key(text: str, message: str) -> None:
    with pytest.raises(Invalid) as info:
        read_scheduling(text, "slurm.conf")
    assert info.value.detail.startswith(message), info.value.detail


def test_partition_priority_job_factor_and_billing_weights_become_annotations() -> None:
    objs = read_slurm_conf(
        NODES
        + "PartitionName=gpu Nodes=ALL PriorityJobFactor=20 TRESBillingWeights=CPU=1.0,Mem=0.25G\n"
        + "PartitionName=cpu Nodes=ALL\n",
        "slurm.conf",
    )
    queues = {o.name: o for o in objs if isinstance(o, ClusterQueue)}
    assert queues["gpu"].annotations["slurm.phalanx.io/priority-job-factor"] == "20"
    assert queues["gpu"].annotations["slurm.phalanx.io/tres-billing-weights"] == "CPU=1.0,Mem=0.25G"
    assert "slurm.phalanx.io/priority-job-factor" not in queues["cpu"].annotations
    with pytest.raises(Invalid) as info:
        read_slurm_conf(NODES + "\nPartitionName=p Nodes=ALL PriorityJobFactor=x\n", "s.conf")
    assert info.value.detail.startswith("s.conf:3: PriorityJobFactor: expected an integer")


def test_a_slurm_conf_given_to_up_orders_jobs_by_its_weights(tmp_path: Path) -> None:
    """The path ``phalanx up --config slurm.conf`` takes: objects plus engine settings."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        NODES
        + "PriorityWeightPartition=1000\nPriorityWeightFairshare=100\n"
        + "PartitionName=hi Nodes=ALL PriorityJobFactor=4\n"
        + "PartitionName=lo Nodes=ALL PriorityJobFactor=1\n"
    )
    objects, settings = read_configs([conf])
    engine = Engine(EngineConfig.for_preset("slurm", **settings))
    for obj in objects:
        engine.apply(Upsert(obj))
    engine.apply(Upsert(Tenant(name="t")))
    engine.apply(TenantUsage("t", 0.0, billing=1.0))
    for job_id, partition in ((1, "lo"), (2, "hi")):
        engine.apply(
            Submit(
                Job(
                    id=job_id,
                    tenant="t",
                    cluster_queue=partition,
                    pod_sets=[PodSet(requests={"nvidia.com/gpu": 64})],  # never fits
                )
            )
        )
    engine.cycle(0.0)
    assert engine.priority_factors(2) == pytest.approx(
        {**(engine.priority_factors(2) or {}), "partition": 1000.0, "fairshare": 100.0}
    )
    lo = engine.priority_factors(1)
    assert lo is not None and lo["partition"] == pytest.approx(250.0)
    assert engine.jobs[2].priority == 1100.0 and engine.jobs[1].priority == 350.0


def test_up_with_a_slurm_conf_and_the_slurm_preset(tmp_path: Path) -> None:
    from phalanx.server import start_server

    conf = tmp_path / "slurm.conf"
    conf.write_text(NODES + CONF + "PartitionName=gpu Nodes=ALL PriorityJobFactor=3\n")
    server = start_server(tmp_path / "state", port=0, configs=[conf], preset="slurm")
    try:
        config = server.plane.engine.config
        assert config.preset == "slurm"
        assert config.slurm_priority.weight_fairshare == 10000
        assert config.priority_calc_period_s == 120.0
        assert config.backfill is not None and config.backfill.window_s == 2880 * 60.0
        info = server.plane.engine.cache.cluster_queues["gpu"]
        assert info.model.annotations["slurm.phalanx.io/priority-job-factor"] == "3"
    finally:
        server.stop()
    with pytest.raises(Invalid) as error:
        bad = tmp_path / "bad.conf"
        bad.write_text(NODES + "PriorityWeightQOS=-1\n")
        start_server(tmp_path / "state2", port=0, configs=[bad], preset="slurm")
    assert error.value.detail.startswith(f"{bad}:2: PriorityWeightQOS=-1: expected a whole")


def test_import_says_the_scheduling_keys_need_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from phalanx.cli.main import main

    conf = tmp_path / "slurm.conf"
    conf.write_text(NODES + "PriorityWeightAge=10\nPartitionName=p Nodes=ALL PriorityJobFactor=2\n")
    assert main(["import", "--dry-run", str(conf)]) == 0
    out, err = capsys.readouterr()
    assert "slurm.phalanx.io/priority-job-factor: '2'" in out
    assert err == (
        f"note: {conf}'s scheduling keys (Priority*, SchedulerType, SchedulerParameters, "
        f"MaxArraySize) are server settings: they take effect with phalanx up --config {conf}\n"
    )
