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

__all__ = ["NODE_XIDS", "NvmlHealth", "detect_gpus"]

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


NODE_XIDS = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
"""The XID errors that are the GPU's or the node's fault (not an application's, such
as 13 or 31): a node that reports one is drained until an admin resumes it."""


class NvmlHealth:
    """``phalanx up --detect``'s built-in health check of this machine's GPUs.

    Each call says why the node is unhealthy, or ``None``: a GPU lost (NVML sees
    fewer GPUs than at the first call, or a device answers ``GPU is lost``), an
    uncorrected ECC error since the driver loaded, or a critical XID error since
    the last call (NVML's event set, kept between calls), as ``(reason, lasting)``.
    A lasting fault (an XID error: an event, seen once) keeps the node drained
    until an admin resumes it; the others last as long as NVML reports them. NVML
    is initialised at the first call and kept; a machine without NVML is never
    failed by it.
    """

    def __init__(self) -> None:
        self._nvml: Any = None
        self._count = 0
        self._events: Any = None
        self._unavailable = False

    def _start(self) -> Any:
        if self._nvml is not None or self._unavailable:
            return self._nvml
        try:
            import pynvml  # type: ignore[import-not-found, unused-ignore]

            pynvml.nvmlInit()
            count = int(pynvml.nvmlDeviceGetCount())
        except Exception:
            self._unavailable = True
            return None
        self._nvml, self._count = pynvml, count
        try:
            events = pynvml.nvmlEventSetCreate()
            for index in range(count):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                with contextlib.suppress(Exception):
                    pynvml.nvmlDeviceRegisterEvents(
                        handle, pynvml.nvmlEventTypeXidCriticalError, events
                    )
            self._events = events
        except Exception:
            self._events = None
        return pynvml

    def __call__(self) -> tuple[str, bool] | None:
        nvml = self._start()
        if nvml is None:
            return None
        xid = self._xid()
        if xid is not None:
            return xid, True
        fault = self._fault(nvml)
        return (fault, False) if fault is not None else None

    def _fault(self, nvml: Any) -> str | None:
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            return f"GPU lost: NVML fails: {exc}"
        if count < self._count:
            return f"GPU lost: NVML sees {count} of {self._count} GPUs"
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception as exc:
                return f"GPU {index} lost: {exc}"
            try:
                ecc = int(
                    nvml.nvmlDeviceGetTotalEccErrors(
                        handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                    )
                )
            except Exception as exc:
                if _gpu_is_lost(nvml, exc):
                    return f"GPU {index} lost: {exc}"
                ecc = 0  # ECC not supported (or off) on this GPU
            if ecc > 0:
                return f"GPU {index}: {ecc} uncorrected ECC errors"
        return None

    def _xid(self) -> str | None:
        if self._events is None:
            return None
        nvml = self._nvml
        found: str | None = None
        while True:
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except Exception:
                return found  # NVML_ERROR_TIMEOUT: no more events
            xid = int(getattr(data, "eventData", 0))
            if found is None and xid in NODE_XIDS:
                index = _index_of(nvml, getattr(data, "device", None))
                where = f"GPU {index}" if index is not None else "a GPU"
                found = f"{where}: XID {xid} ({NODE_XIDS[xid]})"


def _gpu_is_lost(nvml: Any, exc: Exception) -> bool:
    lost = getattr(nvml, "NVML_ERROR_GPU_IS_LOST", 15)
    return getattr(exc, "value", None) == lost


def _index_of(nvml: Any, handle: Any) -> int | None:
    if handle is None:
        return None
    try:
        return int(nvml.nvmlDeviceGetIndex(handle))
    except Exception:
        return None
