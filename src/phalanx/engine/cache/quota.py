"""The quota tree: ClusterQueues and Cohorts, and the arithmetic of borrowing and lending.

Every ClusterQueue and Cohort is a :class:`QuotaNode`. For each flavor-resource
pair ``fr`` a node holds its own quota (``nominal``, optional ``borrowing_limit``
and ``lending_limit``), its ``subtree`` quota and its ``usage``. The formulas are
Kueue's (``pkg/cache/scheduler/resource_node.go``), gathered here in one place:

``local(n) = max(0, subtree(n) - lending_limit(n))`` if ``n`` has a lending
limit, else ``0``.
    The part of a node's quota it keeps private. A node without a lending
    limit lends everything it does not use, so nothing is private.

``subtree(cq) = nominal(cq)``;
``subtree(cohort) = nominal(cohort) + sum(subtree(c) - local(c) for c in children)``.
    What a node can hand out: its own quota plus what its children put into
    the pool.

``usage(cohort) = sum(max(0, usage(c) - local(c)) for c in children)``.
    A child's usage is charged to its private part first; only the excess
    lands in the parent.

``available(root) = subtree(root) - usage(root)``; for a node ``n`` with parent ``p``:
``available(n) = max(0, local(n) - usage(n)) + A``, where
``A = available(p)``, capped, when ``n`` has a borrowing limit, at
``(subtree(n) - local(n)) - max(0, usage(n) - local(n)) + borrowing_limit(n)``.
    Free private quota plus what the parent can still give, never more than
    the node's pooled quota plus its borrowing limit minus what it already
    draws from the pool.

``potential(root) = subtree(root)``; otherwise
``potential(n) = local(n) + potential(p)``, capped at ``subtree(n) + borrowing_limit(n)``.
    The largest request that could ever fit, on an empty cluster.

A ClusterQueue *borrows* on ``fr`` when ``usage + request > nominal``. Its
*borrowing height* is the height of the lowest subtree that holds the request
(0 = within nominal quota); Kueue admits non-borrowing workloads first.

Usage changes walk from a ClusterQueue to the root: O(tree depth). A quota
change rebuilds the affected tree: O(nodes x flavor-resources), and is rare.
All amounts are exact integers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

FlavorResource = tuple[str, str]
"""``(flavor, resource)``."""

__all__ = [
    "FlavorResource",
    "QuotaNode",
    "Shortage",
    "available",
    "binding_limit",
    "find_shortage",
    "potential_available",
]


@dataclass(eq=False, slots=True)
class QuotaNode:
    """A ClusterQueue (``is_cluster_queue``) or a Cohort in the quota tree."""

    name: str
    is_cluster_queue: bool
    parent: QuotaNode | None = None
    children: list[QuotaNode] = field(default_factory=list)
    nominal: dict[FlavorResource, int] = field(default_factory=dict)
    borrowing_limit: dict[FlavorResource, int] = field(default_factory=dict)
    lending_limit: dict[FlavorResource, int] = field(default_factory=dict)
    subtree: dict[FlavorResource, int] = field(default_factory=dict)
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    top: QuotaNode | None = None
    """The root of this node's tree (set when the tree is built)."""
    cached_height: int = -1
    simple: bool = False
    """No borrowing or lending limit on this node or above it: then ``available`` is the
    root's ``subtree - usage`` and ``potential_available`` the root's ``subtree``."""
    version: int = 0
    """Bumped whenever this node's own ``usage`` changes (answers derived from it may
    be kept until then)."""

    @property
    def kind(self) -> str:
        return "ClusterQueue" if self.is_cluster_queue else "Cohort"

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def ancestors(self) -> Iterator[QuotaNode]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def local(self, fr: FlavorResource) -> int:
        limit = self.lending_limit.get(fr)
        if limit is None:
            return 0
        return max(0, self.subtree.get(fr, 0) - limit)

    def local_available(self, fr: FlavorResource) -> int:
        return max(0, self.local(fr) - self.usage.get(fr, 0))

    # usage ---------------------------------------------------------------

    def add_usage(self, fr: FlavorResource, amount: int) -> None:
        """Charge ``amount``: private quota first, the rest to the parent."""
        self.version += 1
        node: QuotaNode | None = self
        while node is not None and amount > 0:
            free_local = node.local_available(fr)
            node.usage[fr] = node.usage.get(fr, 0) + amount
            amount -= free_local
            node = node.parent

    def remove_usage(self, fr: FlavorResource, amount: int) -> None:
        """Release ``amount``: the parent gets back what was drawn from the pool."""
        self.version += 1
        node: QuotaNode | None = self
        while node is not None and amount > 0:
            in_parent = node.usage.get(fr, 0) - node.local(fr)
            node.usage[fr] = node.usage.get(fr, 0) - amount
            if in_parent <= 0:
                return
            amount = min(amount, in_parent)
            node = node.parent

    # rebuild -------------------------------------------------------------

    def rebuild(self) -> None:
        """Recompute ``subtree`` and cohort ``usage`` of this subtree from its leaves."""
        if self.is_cluster_queue:
            self.subtree = dict(self.nominal)
            return
        self.subtree = dict(self.nominal)
        self.usage = {}
        for child in self.children:
            child.rebuild()
            for fr, quota in child.subtree.items():
                self.subtree[fr] = self.subtree.get(fr, 0) + quota - child.local(fr)
            for fr, used in child.usage.items():
                excess = max(0, used - child.local(fr))
                if excess or fr in self.usage:
                    self.usage[fr] = self.usage.get(fr, 0) + excess

    # questions -----------------------------------------------------------

    def borrowing_with(self, fr: FlavorResource, amount: int) -> bool:
        if self.is_cluster_queue:
            return self.nominal.get(fr, 0) < self.usage.get(fr, 0) + amount
        return self.subtree.get(fr, 0) < self.usage.get(fr, 0) + amount

    def height(self) -> int:
        """Height of a cohort's subtree; 1 for a cohort with only ClusterQueues."""
        if self.cached_height >= 0:
            return self.cached_height
        best = min(len(self.children), 1)
        for child in self.children:
            if not child.is_cluster_queue:
                best = max(best, child.height() + 1)
        self.cached_height = best
        return best

    def borrowing_height(self, fr: FlavorResource, amount: int) -> int:
        """Height of the lowest subtree that fits ``amount`` more of ``fr`` (0: no borrowing)."""
        if self.parent is None or not self.borrowing_with(fr, amount):
            return 0
        if self.simple:
            # No lending limits: nothing is private, every node sees the whole request.
            ancestor: QuotaNode | None = self.parent
            while ancestor is not None:
                if ancestor.subtree.get(fr, 0) >= ancestor.usage.get(fr, 0) + amount:
                    return ancestor.height()
                if ancestor.parent is None:
                    return ancestor.height()
                ancestor = ancestor.parent
        remaining = amount - self.local_available(fr)
        node: QuotaNode | None = self.parent
        last = self.parent
        while node is not None:
            if not node.borrowing_with(fr, remaining):
                return node.height()
            remaining -= node.local_available(fr)
            last = node
            node = node.parent
        return last.height()


def available(node: QuotaNode, fr: FlavorResource) -> int:
    """How much more of ``fr`` ``node`` can use now (may be negative in debt)."""
    parent = node.parent
    if parent is None:
        return node.subtree.get(fr, 0) - node.usage.get(fr, 0)
    from_parent = available(parent, fr)
    limit = node.borrowing_limit.get(fr)
    if limit is not None:
        local = node.local(fr)
        stored = node.subtree.get(fr, 0) - local
        used_in_parent = max(0, node.usage.get(fr, 0) - local)
        from_parent = min(from_parent, stored - used_in_parent + limit)
    return node.local_available(fr) + from_parent


def potential_available(node: QuotaNode, fr: FlavorResource) -> int:
    """The largest amount of ``fr`` that ``node`` could ever use."""
    parent = node.parent
    if parent is None:
        return node.subtree.get(fr, 0)
    result = node.local(fr) + potential_available(parent, fr)
    limit = node.borrowing_limit.get(fr)
    if limit is not None:
        result = min(result, node.subtree.get(fr, 0) + limit)
    return result


@dataclass(frozen=True, slots=True)
class Shortage:
    """Where a request runs out of quota: which node's limit binds, and by how much."""

    node: str
    kind: str
    limit: str
    short_by: int


def binding_limit(node: QuotaNode, fr: FlavorResource) -> tuple[QuotaNode, str]:
    """The node whose cap binds ``node``'s availability of ``fr``, and which cap it is.

    Walks the same chain as :func:`available`: a borrowing limit on the way up
    that is tighter than what the parent offers, or else the root's quota.
    """
    current = node
    while current.parent is not None:
        limit = current.borrowing_limit.get(fr)
        if limit is not None:
            local = current.local(fr)
            stored = current.subtree.get(fr, 0) - local
            used_in_parent = max(0, current.usage.get(fr, 0) - local)
            if stored - used_in_parent + limit < available(current.parent, fr):
                return current, "borrowingLimit"
        current = current.parent
    return current, "nominalQuota" if current.is_cluster_queue else "quota"


def find_shortage(node: QuotaNode, fr: FlavorResource, amount: int) -> Shortage:
    """Explain why ``amount`` of ``fr`` does not fit ``node`` (a ClusterQueue) now."""
    short_by = amount - max(0, available(node, fr))
    where, limit = binding_limit(node, fr)
    return Shortage(where.name, where.kind, limit, short_by)
