"""The GPU device nodes a containerised task sees: its own GPUs' and the driver's."""

from __future__ import annotations

import os

__all__ = ["gpu_devices"]

DRIVER_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
    "/dev/nvidia-caps",
)


def gpu_devices(visible: str | None) -> list[str]:
    """``/dev/nvidiaN`` for each GPU index in ``visible`` (``CUDA_VISIBLE_DEVICES``) and the
    driver's control nodes, those that exist on this machine; none without GPUs."""
    if not visible:
        return []
    out = [f"/dev/nvidia{index}" for index in visible.split(",") if index.strip().isdigit()]
    if not out:
        return []
    out.extend(DRIVER_NODES)
    return [path for path in out if os.path.exists(path)]
