"""The Ray runtime: phalanx's jobs on a Ray cluster of many machines.

``phalanx up --runtime ray --ray-address HOST:PORT`` keeps the control plane and
the engine as they are and changes where jobs run:

- :mod:`~phalanx.runtime.ray.inventory`: every Ray node is a phalanx Node (its
  resources, its labels); nodes joining and leaving are followed live, a dead
  one turns ``down``;
- :mod:`~phalanx.runtime.ray.runtime`: an admitted job is one placement group,
  one bundle per (node, pod set) of the engine's placement, pinned to that node
  (Ray's resource view counts the job);
- :mod:`~phalanx.runtime.ray.agent`: one long-lived agent actor per Ray node runs
  the tasks of every job placed there under the same supervisor as the local
  runtime (Slurm environment, output files, time limits, cancel), forked by the
  node's fork server;
- :mod:`~phalanx.runtime.ray.proxy`: ``srun`` in a batch job starts its tasks on
  the other nodes through their agents;
- :mod:`~phalanx.runtime.ray.connect`: connecting without the loopback hang.

Ray is an optional dependency (``pip install 'phalanx[ray]'``); nothing here
imports it until a Ray runtime is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phalanx.runtime.ray.runtime import RayRuntime

__all__ = ["RayRuntime"]


def __getattr__(name: str) -> Any:
    if name == "RayRuntime":
        from phalanx.runtime.ray.runtime import RayRuntime

        return RayRuntime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
