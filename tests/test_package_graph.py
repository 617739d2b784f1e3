"""phalanx's packages import one another without cycles.

Every import of a ``phalanx`` module counts, at module level or inside a function
(a lazy import is still a dependency); those only under ``TYPE_CHECKING`` do not.
The root package, which only re-exports, is left out.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from graphlib import CycleError, TopologicalSorter
from itertools import pairwise
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "phalanx"


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _imports(tree: ast.AST) -> list[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            node.body = []
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("phalanx."):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(a.name for a in node.names if a.name.startswith("phalanx."))
    return found


def package_graph() -> dict[str, dict[str, set[str]]]:
    """package -> imported package -> the files that import it."""
    edges: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        source = parts[0] if len(parts) > 1 else None
        if source is None:
            continue
        for module in _imports(ast.parse(path.read_text())):
            target = _package(module)
            if target is not None and target != source:
                edges[source][target].add(str(path.relative_to(SRC)))
    return edges


def test_the_package_graph_has_no_cycles() -> None:
    edges = package_graph()
    try:
        TopologicalSorter({a: set(targets) for a, targets in edges.items()}).prepare()
    except CycleError as exc:
        cycle = exc.args[1]  # [a, ..., a]: each imported by the one after it
        steps = [
            f"{later} -> {earlier} in {sorted(edges[later][earlier])}"
            for earlier, later in pairwise(cycle)
        ]
        raise AssertionError("package import cycle: " + "; ".join(steps)) from None


def test_the_dialects_and_the_model_do_not_import_the_engine() -> None:
    """The dialects produce model data (manifests, submissions, scheduling settings);
    the composition root hands it to the engine."""
    edges = package_graph()
    for package in ("dialects", "model"):
        assert "engine" not in edges.get(package, {}), sorted(edges[package]["engine"])
