"""Where a phalanx server keeps its state, and where a client looks for it.

The state directory holds the SQLite store, ``client.json`` (the server's URL
and the admin token, mode 0600), the job directories of the local runtime and
the server's lock. ``PHALANX_STATE_DIR`` (or ``--state-dir``) names it; without
one it is ``/var/lib/phalanx`` for root, as for slurmctld's StateSaveLocation
(jobs of other accounts must enter it, which they cannot do under ``/root``),
and ``~/.local/state/phalanx`` (XDG's state home) for everyone else.

Standard library only, and not even :mod:`pathlib` until a :class:`~pathlib.Path` is
asked for: every CLI command resolves it (:func:`state_dir_text`).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CLIENT_CONFIG",
    "LOCK_FILE",
    "LOG_FILE",
    "STATE_DIR_ENV",
    "SYSTEM_STATE_DIR",
    "default_state_dir",
    "make_state_dir",
    "state_dir_text",
]

CLIENT_CONFIG = "client.json"
"""The server's URL and the admin token (mode 0600); the CLI reads it."""
LOCK_FILE = "phalanx.lock"
"""Held by the server while it runs; holds its pid."""
LOG_FILE = "server.log"
"""Where a server started in the background writes."""
STATE_DIR_ENV = "PHALANX_STATE_DIR"
_SYSTEM_STATE_DIR = "/var/lib/phalanx"


def __getattr__(name: str) -> Path:
    if name == "SYSTEM_STATE_DIR":
        from pathlib import Path

        return Path(_SYSTEM_STATE_DIR)
    raise AttributeError(f"module 'phalanx.statedir' has no attribute {name!r}")


SYSTEM_STATE_DIR: Path
"""Root's default: a system location every account can enter."""


def state_dir_text() -> str:
    """``PHALANX_STATE_DIR``, else root's system folder, else the user's XDG state home."""
    env = os.environ.get(STATE_DIR_ENV)
    if env:
        return env
    if os.geteuid() == 0:
        return _SYSTEM_STATE_DIR
    xdg = os.environ.get("XDG_STATE_HOME")
    base = xdg if xdg and os.path.isabs(xdg) else os.path.join(_home(), ".local", "state")
    return os.path.join(base, "phalanx")


def _home() -> str:
    """``Path.home()``: ``HOME``, else the account's home directory."""
    home = os.path.expanduser("~")
    if home == "~":
        raise RuntimeError("Could not determine home directory.")
    return home


def default_state_dir() -> Path:
    """:func:`state_dir_text` as a :class:`~pathlib.Path`."""
    from pathlib import Path

    return Path(state_dir_text())


def make_state_dir(path: Path) -> None:
    """Create ``path`` (and its parents); the system folder is made 0755 whatever the umask."""
    path.mkdir(parents=True, exist_ok=True)
    if str(path) == _SYSTEM_STATE_DIR and os.geteuid() == 0:
        path.chmod(0o755)
