"""No test module builds a path to ``../shared`` itself: each goes through tests/shared.py,
whose helpers skip, naming what is missing, where there is no ``../shared``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
EXEMPT = {TESTS / "shared.py", Path(__file__).resolve()}

SHARED_IN_PATH = re.compile(r"/shared(/|$)")
"""In a string: ``../shared``, ``/work/shared/traces``, the ``/shared`` of ``f"{x}/shared"``."""

PATH_CALLS = {"joinpath", "join", "Path", "PurePath", "PosixPath"}
"""Calls (a name or an attribute) whose string arguments are path components."""


def _strings(node: ast.AST) -> list[ast.Constant]:
    """``node`` if a string constant, or the string constants in a tuple or list."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List) else [node]
    return [n for n in items if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _is_component(node: ast.Constant) -> bool:
    return str(node.value).split("/")[0] == "shared"


def offences(source: str, name: str) -> list[str]:
    """``name:line: why`` for each place ``source`` reaches ../shared on its own."""
    tree = ast.parse(source, filename=name)
    # Docstrings (of modules, classes, functions and attributes) only talk about paths.
    prose = {
        id(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant | ast.JoinedStr)
    }
    prose |= {id(c) for n in ast.walk(tree) if id(n) in prose for c in ast.walk(n)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in prose:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if SHARED_IN_PATH.search(node.value):
                found.append((node.lineno, f"the path {node.value!r}"))
            elif node.value == "PHALANX_SHARED":
                found.append((node.lineno, "reads PHALANX_SHARED itself"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            found += [(c.lineno, '/ "shared"') for c in _strings(node.right) if _is_component(c)]
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in PATH_CALLS:
                found += [
                    (c.lineno, f'{called}(... "shared" ...)')
                    for arg in node.args
                    for c in _strings(arg)
                    if _is_component(c)
                ]
    return [
        f"{name}:{line}: {why}: use tests/shared.py (shared_path, needs_shared, require_shared)"
        for line, why in sorted(set(found))
    ]


def test_no_test_module_builds_a_path_to_shared() -> None:
    files = sorted(p for p in TESTS.rglob("*.py") if p not in EXEMPT)
    names = [p.relative_to(REPO).as_posix() for p in files]
    assert len(files) > 50 and "tests/kueue_jobs/conftest.py" in names  # it did look
    found = [o for p, n in zip(files, names, strict=True) for o in offences(p.read_text(), n)]
    assert found == [], "\n".join(found)


BAD = [
    'SHARED = REPO.parent / "shared"',
    'X = Path(__file__).resolve().parents[3] / "shared" / "examples"',
    'X = ROOT / "shared/traces"',
    'X = Path("../shared/traces")',
    'X = REPO / "../shared"',
    'X = REPO.parent.joinpath("shared", "traces")',
    'X = os.path.join(ROOT, "..", "shared")',
    'X = "/".join(("..", "shared"))',
    'X = f"{REPO}/../shared/traces"',
    'X = "/work/shared/reference/kueue.md"',
    'X = os.environ["PHALANX_SHARED"]',
    'shared = setup.work / "shared"',
]


@pytest.mark.parametrize("snippet", BAD)
def test_the_scanner_flags_a_path_to_shared(snippet: str) -> None:
    [offence] = offences(snippet + "\n", "tests/x.py")
    assert offence.startswith("tests/x.py:1: ")


GOOD = [
    '"""Read from ``../shared/traces`` beside the checkout."""',
    'def f() -> None:\n    """The seed (../shared/examples/seed)."""',
    'X = shared_path("traces", "philly")',
    'X = Cluster(name="shared")',
    'run("phalanx", "sim", "--cluster", "shared:1")',
    'pytest.skip(f"{path} is absent (no ../shared beside the checkout)")',
    'X = tmp_path / "shared-folder"',
]


@pytest.mark.parametrize("snippet", GOOD)
def test_the_scanner_passes_what_is_no_path_to_shared(snippet: str) -> None:
    assert offences(snippet + "\n", "tests/x.py") == []
