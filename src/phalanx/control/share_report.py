"""The fair-share report behind ``phalanx sshare``: the tenant tree with shares and usage.

Builds Slurm's association tree (root, tenants as accounts, each tenant's
users as leaves) from the Tenant objects and the usage ledger, and computes
per association what ``sshare -l`` prints: raw and normalized shares, raw usage
(decayed billable TRES-seconds), normalized and effective usage, the fair-share
factor and the level fair-share. Fair Tree by default, the classic
``2^(-UE/S)`` under ``NO_FAIR_TREE``; the math is
:mod:`phalanx.engine.priority`'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.engine.priority import (
    Association,
    AssociationTree,
    classic_effective_usage,
    classic_factor,
    classic_normalized_shares,
    fair_tree,
    fair_tree_effective_usage,
    fair_tree_level_fs,
    fair_tree_shares,
    normalized_usage,
)
from phalanx.model import Tenant
from phalanx.usage.ledger import Key

__all__ = ["share_report"]

_ROOT = ""


def _account(name: str) -> str:
    return "t:" + name


def _user(tenant: str, user: str) -> str:
    return "u:" + json.dumps([tenant, user])


def _tree(
    tenants: Mapping[str, Tenant], users: Iterable[Key], names: Iterable[str]
) -> tuple[AssociationTree, dict[str, Key]]:
    """The association tree and each association's ledger key."""
    accounts: dict[str, tuple[str | None, float]] = {}
    for name in names:
        accounts.setdefault(name, (None, 1.0))
    for name, model in tenants.items():
        accounts[name] = (model.parent, float(model.allocation))
    for _, (parent, _shares) in list(accounts.items()):
        if parent is not None:
            accounts.setdefault(parent, (None, 1.0))
    # A parent cycle (refused on apply, but stored data is not trusted) hangs under the root.
    for name in list(accounts):
        seen = {name}
        parent = accounts[name][0]
        while parent is not None and parent not in seen:
            seen.add(parent)
            parent = accounts[parent][0]
        if parent is not None:
            accounts[name] = (None, accounts[name][1])
    nodes = [Association(_ROOT, None)]
    keys: dict[str, Key] = {_ROOT: ("", "")}
    for name, (parent, shares) in accounts.items():
        nodes.append(Association(_account(name), _account(parent) if parent else _ROOT, shares))
        keys[_account(name)] = (name, "")
    for tenant, user in sorted(set(users)):
        nodes.append(Association(_user(tenant, user), _account(tenant), 1.0, is_user=True))
        keys[_user(tenant, user)] = (tenant, user)
    return AssociationTree(nodes), keys


def share_report(
    tenants: Mapping[str, Tenant],
    usage: Mapping[Key, tuple[float, float]],
    *,
    fair_tree_mode: bool = True,
    dampening: float = 1.0,
) -> list[dict[str, Any]]:
    """Rows in sshare's order: the root, then each tenant followed by its users
    and then its child tenants, depth first, siblings by name.

    ``usage`` maps ``(tenant, user)`` (``user`` empty for a tenant, both empty
    for the root) to decayed (GPU-seconds, billing-seconds). A level fair-share
    of infinity (shares and no usage) is the string ``"inf"``.
    """
    users = {key for key in usage if key[1]}
    users |= {(name, user) for name, model in tenants.items() for user in model.users}
    names = {key[0] for key in usage if key[0]} | {key[0] for key in users}
    tree, keys = _tree(tenants, users, names)
    raw = {name: usage.get(key, (0.0, 0.0))[1] for name, key in keys.items()}
    gpu = {name: usage.get(key, (0.0, 0.0))[0] for name, key in keys.items()}
    norm_usage = normalized_usage(tree, raw)
    level_fs: Mapping[str, float] = {}
    if fair_tree_mode:
        shares = fair_tree_shares(tree)
        effective = fair_tree_effective_usage(tree, raw)
        level_fs = fair_tree_level_fs(tree, raw)
        factors: Mapping[str, float] = fair_tree(tree, raw)
    else:
        shares = classic_normalized_shares(tree)
        effective = classic_effective_usage(tree, norm_usage)
        factors = {
            name: classic_factor(effective[name], shares[name], dampening)
            for name in tree.names()
            if name != tree.root
        }
    rows: list[dict[str, Any]] = []

    def add(name: str, depth: int) -> None:
        tenant, user = keys[name]
        node = tree.node(name)
        level = level_fs.get(name)
        rows.append(
            {
                "account": tenant or "root",
                "user": user or None,
                "parent": keys[node.parent][0] or "root" if node.parent is not None else None,
                "depth": depth,
                "raw_shares": None if node.parent is None else node.shares,
                "norm_shares": shares.get(name, 0.0),
                "raw_usage": raw[name],
                "gpu_hours": gpu[name] / 3600.0,
                "norm_usage": norm_usage.get(name, 0.0),
                "effective_usage": effective.get(name, 0.0),
                "fair_share": factors.get(name),
                "level_fs": None
                if level is None
                else ("inf" if math.isinf(level) else round(level, 12)),
            }
        )
        children = tree.children(name)
        for child in sorted((c for c in children if tree.node(c).is_user), key=lambda c: keys[c]):
            add(child, depth + 1)
        for child in sorted(
            (c for c in children if not tree.node(c).is_user), key=lambda c: keys[c]
        ):
            add(child, depth + 1)

    add(tree.root, 0)
    return rows
