"""``phalanx up --detect``: describe this machine's NVIDIA GPUs as one node, through NVML.

NVML comes from ``nvidia-ml-py`` (the ``nvidia`` extra), imported only here and
only when called.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

from phalanx.errors import Invalid
from phalanx.model import Node

__all__ = ["detect_gpus"]

HOSTNAME_LABEL = "kubernetes.io/hostname"
PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return None


def _as_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _query_nvml() -> tuple[int, str]:
    """``(gpu count, product name of GPU 0)``; :class:`Invalid` when NVML has none."""
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise Invalid(
            "--detect: no NVIDIA GPUs found (NVML: the nvidia-ml-py package is not "
            "installed; pip install 'phalanx[nvidia]')"
        ) from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        raise Invalid(f"--detect: no NVIDIA GPUs found (NVML: {exc})") from None
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        if count == 0:
            raise Invalid("--detect: no NVIDIA GPUs found (NVML: the driver reports 0 devices)")
        product = _as_str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)))
    except Invalid:
        raise
    except Exception as exc:
        raise Invalid(f"--detect: no NVIDIA GPUs found (NVML: {exc})") from None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return count, product


def detect_gpus(name: str | None = None) -> Node:
    """One :class:`~phalanx.model.Node` for this machine with the GPUs NVML sees.

    ``name`` defaults to the hostname. Raises :class:`~phalanx.errors.Invalid`
    when nvidia-ml-py is missing, NVML cannot start (no driver) or it finds no GPU.
    """
    count, product = _query_nvml()
    hostname = name or socket.gethostname()
    capacity: dict[str, int] = {GPU_RESOURCE: count, "cpu": os.cpu_count() or 1}
    memory = _memory_bytes()
    if memory is not None:
        capacity["memory"] = memory
    return Node(
        name=hostname,
        labels={HOSTNAME_LABEL: hostname, PRODUCT_LABEL: product.strip().replace(" ", "-")},
        capacity=capacity,
    )
