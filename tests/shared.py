"""Where the reference material in ``../shared`` is, and skipping the tests that read it.

``../shared`` lies beside the checkout (``$PHALANX_SHARED`` names another folder). CI
always has it; a user's clone does not, so a test that reads it skips, naming what is
missing, never fails (also when ``CI`` is set). Test modules find these paths only
here: tests/test_shared_guard.py fails on one that builds such a path itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_ENV = "PHALANX_SHARED"
"""Names the folder to use instead of ``../shared`` beside the checkout."""

REPO = Path(__file__).resolve().parents[1]


def shared_root() -> Path:
    """``$PHALANX_SHARED`` if set, else ``../shared`` beside the checkout."""
    env = os.environ.get(SHARED_ENV)
    return Path(env).expanduser() if env else REPO.parent / "shared"


def shared_path(*parts: str) -> Path:
    """``parts`` under the shared folder, present or not: guard its reads with the others."""
    return shared_root().joinpath(*parts)


def missing(*parts: str) -> str | None:
    """Why ``parts`` cannot be read (a skip reason naming it), or None when it is there."""
    path = shared_path(*parts)
    if path.exists():
        return None
    root = shared_root()
    if root.is_dir():
        return f"{path} is absent ({root} has no {'/'.join(parts)})"
    env = os.environ.get(SHARED_ENV)
    where = f"; {SHARED_ENV}={env} is not a folder" if env else ""
    return f"{path} is absent (no ../shared beside the checkout{where})"


def has_shared(*parts: str) -> bool:
    """Whether ``parts`` is there to read."""
    return missing(*parts) is None


def needs_shared(*parts: str) -> pytest.MarkDecorator:
    """Skip the test, class or module (``pytestmark``) unless ``parts`` is there."""
    reason = missing(*parts)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def require_shared(*parts: str) -> Path:
    """The path of ``parts``; skips the test (or fixture's users) when it is absent."""
    __tracebackhide__ = True  # the skip is reported where this was called
    reason = missing(*parts)
    if reason is not None:
        pytest.skip(reason)
    return shared_path(*parts)


def shared_files(*parts: str, pattern: str = "*") -> list[Path]:
    """The files matching ``pattern`` anywhere below the folder ``parts``, sorted; [] when
    it is absent (for parametrize: guard the test with :func:`needs_shared` too)."""
    folder = shared_path(*parts)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob(pattern) if p.is_file())
