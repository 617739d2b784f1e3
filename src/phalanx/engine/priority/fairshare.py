"""Slurm's fair-share factors: the classic algorithm and Fair Tree.

**Classic** (``PriorityFlags=NO_FAIR_TREE``): normalized shares are the product,
along the path from the root, of each association's raw shares over its
siblings' (``_normalize_assoc_shares_traditional`` in ``assoc_mgr.c``);
effective usage is ``UE = U + (UE_parent - U) * S_raw / S_siblings`` below the
first tier and plain ``U`` on the first tier (``_set_usage_efctv`` in
``priority_multifactor.c``); the factor is ``2^(-UE / S / dampening)``
(``priority_p_calc_fs_factor``), 0 without shares.

**Fair Tree** (the default; ``src/plugins/priority/multifactor/fair_tree.c``):
each association's level fair-share is ``S / U`` with ``S`` its raw shares over
its siblings' (``_normalize_assoc_shares_fair_tree``) and ``U`` its raw usage
over its parent's (``_calc_assoc_fs``). ``_calc_tree_fs`` sorts each level by
level fair-share (descending, users before accounts on ties), gives users
``rank / user_count`` and recurses into accounts, merging the children of tied
sibling accounts; tied siblings share a rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from phalanx.engine.priority.tree import AssociationTree


def classic_normalized_shares(tree: AssociationTree) -> dict[str, float]:
    """Classic ``shares_norm`` of every association (the root gets 1)."""
    shares = {tree.root: 1.0}
    stack = [tree.root]
    while stack:
        parent = stack.pop()
        level = tree.level_shares(parent)
        for child in tree.children(parent):
            local = tree.node(child).shares / level if level > 0 else 0.0
            shares[child] = shares[parent] * local
            stack.append(child)
    return shares


def classic_effective_usage(
    tree: AssociationTree, usage_norm: Mapping[str, float]
) -> dict[str, float]:
    """Classic ``usage_efctv`` of every association from normalized usage."""
    effective = {tree.root: usage_norm.get(tree.root, 0.0)}
    stack = [tree.root]
    while stack:
        parent = stack.pop()
        level = tree.level_shares(parent)
        for child in tree.children(parent):
            own = usage_norm.get(child, 0.0)
            if parent == tree.root:
                effective[child] = own
            elif level <= 0:
                effective[child] = effective[parent]
            else:
                ratio = tree.node(child).shares / level
                effective[child] = own + (effective[parent] - own) * ratio
            stack.append(child)
    return effective


def classic_factor(usage_efctv: float, shares_norm: float, dampening: float = 1.0) -> float:
    """``2^(-UE / S / d)``; an association without shares gets 0."""
    if dampening <= 0:
        raise ValueError("FairShareDampeningFactor must be > 0")
    if shares_norm <= 0:
        return 0.0
    return float(2.0 ** (-(usage_efctv / shares_norm) / dampening))


def classic_fair_share(
    tree: AssociationTree, usage_norm: Mapping[str, float], dampening: float = 1.0
) -> dict[str, float]:
    """Classic fair-share factor of every user, from per-association normalized
    usage (each account's usage includes its descendants')."""
    shares = classic_normalized_shares(tree)
    effective = classic_effective_usage(tree, usage_norm)
    return {u: classic_factor(effective[u], shares[u], dampening) for u in tree.users()}


def fair_tree_shares(tree: AssociationTree) -> dict[str, float]:
    """Fair Tree ``shares_norm``: raw shares over self-plus-siblings' raw shares."""
    shares = {tree.root: 1.0}
    for name in tree.names():
        parent = tree.parent(name)
        if parent is None:
            continue
        level = tree.level_shares(parent)
        shares[name] = tree.node(name).shares / level if level > 0 else 0.0
    return shares


def fair_tree_effective_usage(
    tree: AssociationTree, usage_raw: Mapping[str, float]
) -> dict[str, float]:
    """Fair Tree ``usage_efctv``: raw usage over the parent's (0 if that is 0)."""
    effective = {tree.root: 1.0}
    for name in tree.names():
        parent = tree.parent(name)
        if parent is None:
            continue
        parent_usage = usage_raw.get(parent, 0.0)
        effective[name] = usage_raw.get(name, 0.0) / parent_usage if parent_usage > 0 else 0.0
    return effective


def level_fair_share(shares_norm: float, usage_efctv: float) -> float:
    """``S / U``: 0 without shares, +infinity with shares and no usage."""
    if shares_norm <= 0:
        return 0.0
    if usage_efctv <= 0:
        return math.inf
    return shares_norm / usage_efctv


def fair_tree_level_fs(tree: AssociationTree, usage_raw: Mapping[str, float]) -> dict[str, float]:
    """Level fair-share of every non-root association."""
    shares = fair_tree_shares(tree)
    effective = fair_tree_effective_usage(tree, usage_raw)
    return {
        name: level_fair_share(shares[name], effective[name])
        for name in tree.names()
        if name != tree.root
    }


def fair_tree(
    tree: AssociationTree,
    usage_raw: Mapping[str, float],
    level_fs_override: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Fair Tree fair-share factor of every user, from per-association raw
    usage (each account's usage includes its descendants').

    ``level_fs_override`` replaces the level fair-share of some associations,
    e.g. ``+inf`` for users with ``Fairshare=parent``.
    """
    level_fs = fair_tree_level_fs(tree, usage_raw)
    if level_fs_override:
        level_fs.update(level_fs_override)
    user_count = len(tree.users())
    factors: dict[str, float] = {}
    if user_count == 0:
        return factors
    # rank is the rank last handed out; remaining counts down once per user.
    state = {"rank": user_count, "remaining": user_count}

    def sort_key(name: str) -> tuple[float, int, str]:
        return (-level_fs[name], 0 if tree.node(name).is_user else 1, name)

    def walk(siblings: list[str], account_tied: bool) -> None:
        ordered = sorted(siblings, key=sort_key)
        prev: float | None = None
        i = 0
        while i < len(ordered):
            name = ordered[i]
            value = level_fs[name]
            tied = (i == 0 and account_tied) or prev == value
            if tree.node(name).is_user:
                if not tied:
                    state["rank"] = state["remaining"]
                factors[name] = state["rank"] / user_count
                state["remaining"] -= 1
                i += 1
            else:
                # Sibling accounts tied with this one have their children merged.
                merged: list[str] = list(tree.children(name))
                j = i + 1
                while (
                    j < len(ordered)
                    and not tree.node(ordered[j]).is_user
                    and level_fs[ordered[j]] == value
                ):
                    merged.extend(tree.children(ordered[j]))
                    j += 1
                walk(merged, tied)
                i = j
            prev = value

    walk(list(tree.children(tree.root)), False)
    return factors
