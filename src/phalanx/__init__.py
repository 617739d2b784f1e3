"""phalanx: a GPU workload orchestrator that speaks Slurm and Kueue and schedules gangs.

``import phalanx`` stays light (not even :mod:`typing`): :class:`phalanx.Client` is loaded
on first use.
"""

from __future__ import annotations

TYPE_CHECKING = False
__version__ = "0.1.0"
__all__ = ["Client", "__version__"]

if TYPE_CHECKING:
    from typing import Any

    from phalanx.client import Client


def __getattr__(name: str) -> Any:
    if name == "Client":
        from phalanx.client import Client

        return Client
    raise AttributeError(f"module 'phalanx' has no attribute {name!r}")
