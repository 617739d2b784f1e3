"""Slurm's priority/multifactor math against the documented worked examples."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.engine.priority import (
    PRIORITY_MAX,
    Association,
    AssociationTree,
    PriorityFactors,
    PriorityWeights,
    ResetPeriod,
    age_factor,
    aggregate_usage,
    apply_reset,
    billable_tres,
    charge_usage,
    classic_effective_usage,
    classic_fair_share,
    classic_normalized_shares,
    decay_factor,
    decay_multiplier,
    decay_usage,
    fair_tree,
    fair_tree_level_fs,
    job_priority,
    job_size_factor,
    last_reset_boundary,
    new_usage,
    normalized_usage,
    parse_billing_weights,
    parse_tres_weights,
    partition_factor,
    qos_factor,
    resets_at_start,
    tres_factors,
    usage_reset_due,
)

DAY = 86400.0
GIB_MB = 1024.0


def example_tree() -> AssociationTree:
    """root -> A(40) {B(30): user1; C(10): user2(1), user3(1)},
    D(60) {E(25): user4; F(35): user5}."""
    return AssociationTree(
        [
            Association("root", None),
            Association("A", "root", 40),
            Association("B", "A", 30),
            Association("C", "A", 10),
            Association("D", "root", 60),
            Association("E", "D", 25),
            Association("F", "D", 35),
            Association("user1", "B", 1, is_user=True),
            Association("user2", "C", 1, is_user=True),
            Association("user3", "C", 1, is_user=True),
            Association("user4", "E", 1, is_user=True),
            Association("user5", "F", 1, is_user=True),
        ]
    )


EXAMPLE_USAGE = {"user1": 0.2, "user2": 0.25, "user4": 0.25}


# --- classic fair-share ---------------------------------------------------


def test_classic_example_normalized_shares() -> None:
    shares = classic_normalized_shares(example_tree())
    expected = {"user1": 0.3, "user2": 0.05, "user3": 0.05, "user4": 0.25, "user5": 0.35}
    for user, value in expected.items():
        assert shares[user] == pytest.approx(value, abs=1e-12)


def test_classic_example_effective_usage() -> None:
    tree = example_tree()
    usage = aggregate_usage(tree, EXAMPLE_USAGE)
    assert usage["A"] == pytest.approx(0.45) and usage["D"] == pytest.approx(0.25)
    effective = classic_effective_usage(tree, usage)
    expected = {
        "A": 0.45,
        "D": 0.25,
        "B": 0.3875,
        "C": 0.3,
        "E": 0.25,
        "F": 0.1458,
        "user1": 0.3875,
        "user2": 0.275,
        "user3": 0.15,
        "user4": 0.25,
        "user5": 0.1458,
    }
    for name, value in expected.items():
        assert effective[name] == pytest.approx(value, abs=5e-5), name


@pytest.mark.parametrize(
    ("user", "factor"),
    [
        ("user1", 0.408479),
        ("user2", 0.022097),
        ("user3", 0.125000),
        ("user4", 0.500000),
        ("user5", 0.749154),
    ],
)
def test_classic_example_factors(user: str, factor: float) -> None:
    tree = example_tree()
    factors = classic_fair_share(tree, aggregate_usage(tree, EXAMPLE_USAGE))
    assert factors[user] == pytest.approx(factor, abs=5e-7)


def test_classic_dampening_and_no_shares() -> None:
    tree = AssociationTree(
        [
            Association("root", None),
            Association("acct", "root", 1),
            Association("a", "acct", 1, is_user=True),
            Association("b", "acct", 0, is_user=True),
        ]
    )
    usage = aggregate_usage(tree, {"a": 0.5})
    assert classic_fair_share(tree, usage)["b"] == 0.0
    assert classic_fair_share(tree, usage, dampening=2.0)["a"] == pytest.approx(2 ** (-0.25))


# --- Fair Tree ------------------------------------------------------------


def test_fair_tree_example_level_fs() -> None:
    tree = example_tree()
    level = fair_tree_level_fs(tree, aggregate_usage(tree, EXAMPLE_USAGE))
    assert level["A"] == pytest.approx(0.6222, abs=5e-5)
    assert level["D"] == pytest.approx(1.68, abs=5e-3)
    assert level["E"] == pytest.approx(0.4167, abs=5e-5)
    assert level["F"] == float("inf")
    assert level["B"] == pytest.approx(1.6875, abs=1e-12)
    assert level["C"] == pytest.approx(0.45, abs=1e-12)
    assert level["user3"] == float("inf")
    assert level["user2"] == pytest.approx(0.5, abs=1e-12)


def test_fair_tree_example_factors() -> None:
    tree = example_tree()
    factors = fair_tree(tree, aggregate_usage(tree, EXAMPLE_USAGE))
    expected = {"user5": 1.0, "user4": 0.8, "user1": 0.6, "user3": 0.4, "user2": 0.2}
    assert factors == pytest.approx(expected, abs=1e-12)


def test_fair_tree_tied_users_share_a_rank() -> None:
    tree = AssociationTree(
        [
            Association("root", None),
            Association("a", "root", 1, is_user=True),
            Association("b", "root", 1, is_user=True),
            Association("c", "root", 2, is_user=True),
        ]
    )
    # c: S=0.5, U=0.5 -> 1; a and b: S=0.25, U=0.25 -> 1: all tied.
    factors = fair_tree(tree, aggregate_usage(tree, {"a": 1.0, "b": 1.0, "c": 2.0}))
    assert factors == {"a": 1.0, "b": 1.0, "c": 1.0}
    factors = fair_tree(tree, aggregate_usage(tree, {"a": 2.0, "b": 1.0, "c": 1.0}))
    # No ties: c (0.5/0.25 = 2), b (0.25/0.25 = 1), a (0.25/0.5 = 0.5).
    assert factors == pytest.approx({"c": 1.0, "b": 2 / 3, "a": 1 / 3})


def test_fair_tree_user_tied_with_account_gets_its_top_rank() -> None:
    tree = AssociationTree(
        [
            Association("root", None),
            Association("u", "root", 1, is_user=True),
            Association("acct", "root", 1),
            Association("x", "acct", 1, is_user=True),
            Association("y", "acct", 1, is_user=True),
        ]
    )
    factors = fair_tree(tree, aggregate_usage(tree, {"u": 1.0, "x": 1.0}))
    # u and acct tie at LevelFS 1; u goes first and acct's top user (y, no
    # usage) shares u's rank 3; x gets rank 1.
    assert factors == pytest.approx({"u": 1.0, "y": 1.0, "x": 1 / 3})


def test_fair_tree_tied_accounts_merge_children() -> None:
    tree = AssociationTree(
        [
            Association("root", None),
            Association("p", "root", 1),
            Association("q", "root", 1),
            Association("p1", "p", 1, is_user=True),
            Association("p2", "p", 1, is_user=True),
            Association("q1", "q", 1, is_user=True),
        ]
    )
    usage = aggregate_usage(tree, {"p1": 3.0, "p2": 1.0, "q1": 4.0})
    # p and q tie at 1, so their children are ranked as one level:
    # p2 (0.5/0.25 = 2), q1 (1/1 = 1), p1 (0.5/0.75 = 0.667).
    assert fair_tree(tree, usage) == pytest.approx({"p2": 1.0, "q1": 2 / 3, "p1": 1 / 3})


# --- usage and decay ------------------------------------------------------


def test_decay_derived_values() -> None:
    half_life = 7 * DAY
    assert decay_factor(half_life) == pytest.approx(0.99999885416667, abs=5e-15)
    assert decay_multiplier(half_life, 300) == pytest.approx(0.99965631, abs=5e-9)
    assert decay_multiplier(half_life, 7 * DAY) == pytest.approx(0.50007, abs=5e-6)
    assert decay_multiplier(half_life, 14 * DAY) == pytest.approx(0.25007, abs=5e-6)
    assert decay_factor(0) == 1.0
    assert decay_usage({"a": 10.0}, 0, 1e6) == {"a": 10.0}


def test_new_usage_and_charge_to_every_ancestor() -> None:
    tree = example_tree()
    amount = new_usage(300, 8.0, 7 * DAY, usage_factor=0.5)
    assert amount == pytest.approx(300 * decay_factor(7 * DAY) ** 300 * 8.0 * 0.5)
    usage = charge_usage(tree, {}, "user2", amount)
    assert usage == pytest.approx({"user2": amount, "C": amount, "A": amount, "root": amount})
    usage = charge_usage(tree, usage, "user4", 1.0)
    norm = normalized_usage(tree, usage)
    assert norm["A"] == pytest.approx(amount / (amount + 1.0))
    assert norm["D"] == pytest.approx(1.0 / (amount + 1.0))


def test_usage_reset_periods() -> None:
    now = datetime(2026, 5, 14, 15, 30, tzinfo=UTC)  # a Thursday
    assert last_reset_boundary(ResetPeriod.DAILY, now) == datetime(2026, 5, 14, tzinfo=UTC)
    assert last_reset_boundary(ResetPeriod.WEEKLY, now) == datetime(2026, 5, 10, tzinfo=UTC)
    assert last_reset_boundary(ResetPeriod.MONTHLY, now) == datetime(2026, 5, 1, tzinfo=UTC)
    assert last_reset_boundary(ResetPeriod.QUARTERLY, now) == datetime(2026, 4, 1, tzinfo=UTC)
    assert last_reset_boundary(ResetPeriod.YEARLY, now) == datetime(2026, 1, 1, tzinfo=UTC)
    assert last_reset_boundary(ResetPeriod.NONE, now) is None
    sunday = datetime(2026, 5, 10, 9, tzinfo=UTC)
    assert last_reset_boundary(ResetPeriod.WEEKLY, sunday) == datetime(2026, 5, 10, tzinfo=UTC)
    before = datetime(2026, 5, 9, 23, tzinfo=UTC)
    assert usage_reset_due(ResetPeriod.WEEKLY, before, now)
    assert not usage_reset_due(ResetPeriod.WEEKLY, sunday, now)
    assert not usage_reset_due(ResetPeriod.NONE, before, now)
    assert resets_at_start(ResetPeriod.NOW) and not resets_at_start(ResetPeriod.DAILY)
    usage, last = apply_reset(ResetPeriod.DAILY, {"a": 5.0}, before, now)
    assert usage == {"a": 0.0} and last == now
    assert apply_reset(ResetPeriod.NONE, {"a": 5.0}, before, now) == ({"a": 5.0}, before)


# --- multifactor ----------------------------------------------------------


def test_weights_example_maximum_priority() -> None:
    weights = PriorityWeights(age=1000, fairshare=5000, job_size=1000)
    top = PriorityFactors(age=1.0, fairshare=1.0, job_size=1.0, partition=1.0, qos=1.0)
    assert job_priority(weights, top) == 7000


@pytest.mark.parametrize(
    ("job_factor", "no_normal", "expected"),
    [(20, False, 5000), (10, False, 2500), (20, True, 100000), (10, True, 50000)],
)
def test_partition_example(job_factor: int, no_normal: bool, expected: int) -> None:
    factor = partition_factor(job_factor, max(20, 10), no_normal=no_normal)
    assert job_priority(PriorityWeights(partition=5000), PriorityFactors(partition=factor)) == (
        expected
    )


BILLING = "CPU=1.0,Mem=0.25G"


@pytest.mark.parametrize(
    ("cpus", "mem_gib", "max_tres", "expected"),
    [
        (1, 60, False, 16.0),
        (16, 1, False, 16.25),
        (16, 60, False, 31.0),
        (1, 60, True, 15.0),
        (15, 1, True, 15.0),  # the doc's MAX_TRES Job2 line: 15*1.0
        (16, 64, True, 16.0),
    ],
)
def test_billing_example(cpus: int, mem_gib: int, max_tres: bool, expected: float) -> None:
    weights = parse_billing_weights(BILLING)
    alloc = {"cpu": float(cpus), "mem": mem_gib * GIB_MB}
    assert billable_tres(alloc, weights, max_tres=max_tres) == pytest.approx(expected, abs=1e-12)


def test_billing_max_tres_gres_and_global() -> None:
    weights = parse_billing_weights("CPU=1,Mem=0.25G,GRES/gpu=4,license/x=2")
    alloc = {"cpu": 8.0, "mem": 16 * GIB_MB, "gres/gpu": 2.0, "license/x": 1.0}
    assert billable_tres(alloc, weights) == pytest.approx(8 + 4 + 8 + 2)
    assert billable_tres(alloc, weights, max_tres=True) == pytest.approx(8 + 2)
    assert billable_tres(alloc, weights, max_tres_gres=True) == pytest.approx(8 + 8 + 2)


E2E_WEIGHTS = PriorityWeights(
    age=1000,
    fairshare=10000,
    job_size=1000,
    partition=1000,
    qos=2000,
    tres=parse_tres_weights("GRES/gpu=3000"),
)


def test_parse_tres_weights() -> None:
    assert parse_tres_weights("CPU=1000,Mem=2000,GRES/gpu=3000") == {
        "cpu": 1000.0,
        "mem": 2000.0,
        "gres/gpu": 3000.0,
    }
    assert parse_tres_weights("CPU=-2.5") == {"cpu": -2.5}


def e2e_factors(**size: bool | int) -> PriorityFactors:
    return PriorityFactors(
        age=age_factor(now=36 * 3600.0, accrue_time=0.0),
        fairshare=0.6,
        job_size=job_size_factor(
            min_nodes=4,
            cpu_count=256,
            node_count=100,
            cluster_cpus=6400,
            **size,  # type: ignore[arg-type]
        ),
        partition=partition_factor(20, 20),
        qos=qos_factor(10, 100),
        tres=tres_factors({"gres/gpu": 32.0}, {"gres/gpu": 800.0}),
    )


def test_end_to_end_vector() -> None:
    factors = e2e_factors()
    assert factors.age == pytest.approx(0.2142857, abs=5e-8)
    assert factors.job_size == pytest.approx(0.04, abs=1e-12)
    assert job_priority(E2E_WEIGHTS, factors) == 7574


def test_end_to_end_vector_favor_small() -> None:
    factors = e2e_factors(favor_small=True)
    assert factors.job_size == pytest.approx(0.96, abs=1e-12)
    assert job_priority(E2E_WEIGHTS, factors) == 8494


def test_end_to_end_vector_small_relative_to_time() -> None:
    factors = e2e_factors(small_relative_to_time=True, time_limit_min=120)
    assert factors.job_size == pytest.approx(0.000333, abs=5e-7)
    assert job_priority(E2E_WEIGHTS, factors) == 7534


def test_priority_clamps() -> None:
    assert job_priority(PriorityWeights(), PriorityFactors()) == 1
    assert job_priority(PriorityWeights(age=10), PriorityFactors(age=1.0), nice=100) == 1
    big = PriorityWeights(age=2**32 - 1, fairshare=2**32 - 1)
    assert job_priority(big, PriorityFactors(age=1.0, fairshare=1.0)) == PRIORITY_MAX
    assert job_priority(PriorityWeights(qos=10), PriorityFactors(qos=0.55), site_factor=3) == 8


# --- properties -----------------------------------------------------------

UINT32 = st.integers(min_value=0, max_value=2**32 - 1)
UNIT = st.floats(min_value=0.0, max_value=1.0)
USAGE = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
USERS = ("user1", "user2", "user3", "user4", "user5")


@st.composite
def factor_sets(draw: st.DrawFn) -> PriorityFactors:
    return PriorityFactors(
        age=draw(UNIT),
        assoc=draw(UNIT),
        fairshare=draw(UNIT),
        job_size=draw(UNIT),
        partition=draw(UNIT),
        qos=draw(UNIT),
        tres={"gres/gpu": draw(UNIT)},
    )


@st.composite
def weight_sets(draw: st.DrawFn) -> PriorityWeights:
    return PriorityWeights(
        age=draw(UINT32),
        assoc=draw(UINT32),
        fairshare=draw(UINT32),
        job_size=draw(UINT32),
        partition=draw(UINT32),
        qos=draw(UINT32),
        tres={"gres/gpu": draw(st.floats(min_value=-1e9, max_value=1e9))},
    )


@settings(max_examples=200, deadline=None)
@given(
    weight_sets(),
    factor_sets(),
    st.integers(min_value=-(2**31), max_value=2**31),
    st.integers(min_value=-(2**31), max_value=2**31),
)
def test_priority_always_in_uint32_range(
    weights: PriorityWeights, factors: PriorityFactors, site: int, nice: int
) -> None:
    assert 1 <= job_priority(weights, factors, site_factor=site, nice=nice) <= PRIORITY_MAX


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=1000),
    st.integers(min_value=1, max_value=64),
    st.data(),
    st.booleans(),
    st.booleans(),
    st.integers(min_value=1, max_value=100000),
)
def test_factors_in_unit_interval(
    node_count: int,
    cpus_per_node: int,
    data: st.DataObject,
    favor_small: bool,
    relative: bool,
    limit: int,
) -> None:
    cluster_cpus = node_count * cpus_per_node
    min_nodes = data.draw(st.integers(min_value=1, max_value=node_count))
    cpu_count = data.draw(st.integers(min_value=0, max_value=cluster_cpus))
    size = job_size_factor(
        min_nodes=min_nodes,
        cpu_count=cpu_count,
        node_count=node_count,
        cluster_cpus=cluster_cpus,
        favor_small=favor_small,
        small_relative_to_time=relative,
        time_limit_min=limit,
    )
    assert 0.0 <= size <= 1.0
    age = age_factor(data.draw(st.floats(0, 1e8)), data.draw(st.floats(0, 1e8)))
    assert 0.0 <= age <= 1.0
    high = data.draw(st.integers(min_value=0, max_value=65533))
    low = data.draw(st.integers(min_value=0, max_value=high))
    assert 0.0 <= partition_factor(low, high) <= 1.0
    assert 0.0 <= qos_factor(low, high) <= 1.0
    total = data.draw(st.floats(min_value=0.0, max_value=1e6))
    used = data.draw(st.floats(min_value=0.0, max_value=total))
    assert 0.0 <= tres_factors({"cpu": used}, {"cpu": total})["cpu"] <= 1.0


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(USERS), USAGE))
def test_fair_share_factors_in_unit_interval(leaf_usage: dict[str, float]) -> None:
    tree = example_tree()
    usage = aggregate_usage(tree, leaf_usage)
    for factors in (
        classic_fair_share(tree, normalized_usage(tree, usage)),
        fair_tree(tree, usage),
    ):
        assert set(factors) == set(USERS)
        assert all(0.0 <= f <= 1.0 for f in factors.values())


@settings(max_examples=200, deadline=None)
@given(
    st.floats(min_value=1.0, max_value=1e7),
    st.floats(min_value=0.0, max_value=1e7),
    st.floats(min_value=0.0, max_value=1e7),
    weight_sets(),
    factor_sets(),
)
def test_priority_monotonic_in_age(
    max_age: float, earlier: float, later: float, weights: PriorityWeights, rest: PriorityFactors
) -> None:
    lo, hi = sorted((earlier, later))
    young = age_factor(lo, 0.0, max_age)
    old = age_factor(hi, 0.0, max_age)
    assert young <= old

    def with_age(age: float) -> PriorityFactors:
        return PriorityFactors(
            age=age,
            assoc=rest.assoc,
            fairshare=rest.fairshare,
            job_size=rest.job_size,
            partition=rest.partition,
            qos=rest.qos,
            tres=rest.tres,
        )

    assert job_priority(weights, with_age(young)) <= job_priority(weights, with_age(old))


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(USERS), USAGE),
    st.sampled_from(USERS),
    st.floats(min_value=0.0, max_value=1e6),
)
def test_more_usage_never_raises_own_fair_share(
    leaf_usage: dict[str, float], user: str, extra: float
) -> None:
    tree = example_tree()
    before_raw = aggregate_usage(tree, leaf_usage)
    after_raw = charge_usage(tree, before_raw, user, extra)
    before = classic_fair_share(tree, normalized_usage(tree, before_raw))
    after = classic_fair_share(tree, normalized_usage(tree, after_raw))
    assert after[user] <= before[user] + 1e-12
    assert fair_tree(tree, after_raw)[user] <= fair_tree(tree, before_raw)[user] + 1e-12
