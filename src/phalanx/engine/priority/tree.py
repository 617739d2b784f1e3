"""The association tree Slurm's priority/multifactor plugin works over.

Accounts form a tree under one root; users are its leaves. Usage charged to a
user is charged to every ancestor up to the root, as ``_apply_new_usage`` in
``src/plugins/priority/multifactor/priority_multifactor.c`` walks
``usage->parent_assoc_ptr``. Raw shares are Slurm's ``Fairshare=`` numbers
(``shares_raw``); siblings' raw shares add up to the parent's ``level_shares``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Association:
    """One account (``is_user=False``) or user association."""

    name: str
    parent: str | None
    shares: float = 1.0
    is_user: bool = False


class AssociationTree:
    """An immutable, validated tree of associations with one root."""

    __slots__ = ("_children", "_nodes", "_root")

    def __init__(self, associations: Iterable[Association]) -> None:
        nodes: dict[str, Association] = {}
        for assoc in associations:
            if assoc.name in nodes:
                raise ValueError(f"duplicate association {assoc.name!r}")
            if assoc.shares < 0:
                raise ValueError(f"association {assoc.name!r} has negative shares")
            nodes[assoc.name] = assoc
        roots = [a.name for a in nodes.values() if a.parent is None]
        if len(roots) != 1:
            raise ValueError(f"expected exactly one root, got {roots}")
        children: dict[str, list[str]] = {name: [] for name in nodes}
        for assoc in nodes.values():
            if assoc.parent is None:
                continue
            if assoc.parent not in nodes:
                raise ValueError(f"{assoc.name!r} names unknown parent {assoc.parent!r}")
            if nodes[assoc.parent].is_user:
                raise ValueError(f"user {assoc.parent!r} cannot have children")
            children[assoc.parent].append(assoc.name)
        self._nodes = nodes
        self._root = roots[0]
        self._children = {name: tuple(kids) for name, kids in children.items()}
        if len(self.descendants(self._root)) + 1 != len(nodes):
            raise ValueError("association tree has a cycle")

    @property
    def root(self) -> str:
        return self._root

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def node(self, name: str) -> Association:
        return self._nodes[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._nodes)

    def users(self) -> tuple[str, ...]:
        return tuple(name for name, a in self._nodes.items() if a.is_user)

    def children(self, name: str) -> tuple[str, ...]:
        return self._children[name]

    def parent(self, name: str) -> str | None:
        return self._nodes[name].parent

    def path_to_root(self, name: str) -> tuple[str, ...]:
        """``name`` and then each ancestor, ending with the root."""
        path = [name]
        parent = self._nodes[name].parent
        while parent is not None:
            path.append(parent)
            parent = self._nodes[parent].parent
        return tuple(path)

    def descendants(self, name: str) -> tuple[str, ...]:
        out: list[str] = []
        stack = list(self._children[name])
        while stack:
            current = stack.pop()
            out.append(current)
            stack.extend(self._children[current])
        return tuple(out)

    def level_shares(self, name: str) -> float:
        """Sum of the raw shares of ``name``'s children."""
        return sum(self._nodes[c].shares for c in self._children[name])


def aggregate_usage(tree: AssociationTree, leaf_usage: Mapping[str, float]) -> dict[str, float]:
    """Usage of every association: its own plus all of its descendants'."""
    total = dict.fromkeys(tree.names(), 0.0)
    for name, amount in leaf_usage.items():
        for assoc in tree.path_to_root(name):
            total[assoc] += amount
    return total
