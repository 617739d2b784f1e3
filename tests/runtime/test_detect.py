"""GPU detection without GPUs: a clear error, never a crash."""

from __future__ import annotations

import sys

import pytest

from phalanx.errors import Invalid
from phalanx.runtime import detect_gpus


def test_no_nvml_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    with pytest.raises(Invalid, match=r"--detect: no NVIDIA GPUs found \(NVML: .*nvidia-ml-py"):
        detect_gpus()


def test_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        node = detect_gpus("here")
    except Invalid as exc:
        assert str(exc).startswith("--detect: no NVIDIA GPUs found (NVML: ")
        return
    assert node.name == "here"
    assert node.capacity["nvidia.com/gpu"] >= 1
    assert " " not in node.labels["nvidia.com/gpu.product"]


class _FakeNVML:
    def __init__(self, count: int, fail_init: bool = False) -> None:
        self.count = count
        self.fail_init = fail_init

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"


def test_fake_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML(8))
    node = detect_gpus("gpu-node")
    assert node.name == "gpu-node"
    assert node.labels == {
        "kubernetes.io/hostname": "gpu-node",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }
    assert node.capacity["nvidia.com/gpu"] == 8
    assert node.capacity["cpu"] >= 1000  # milli-cores
    assert node.capacity["memory"] > 0


@pytest.mark.parametrize(
    ("fake", "detail"), [(_FakeNVML(0), "0 devices"), (_FakeNVML(1, True), "Driver Not Loaded")]
)
def test_no_gpus(monkeypatch: pytest.MonkeyPatch, fake: _FakeNVML, detail: str) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(Invalid, match=detail):
        detect_gpus()


class _NVMLError(Exception):
    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


class _Event:
    def __init__(self, device: int, xid: int) -> None:
        self.device = device
        self.eventData = xid


class _HealthNVML(_FakeNVML):
    """NVML with faults to inject: ECC counts, lost GPUs, XID events."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_ERROR_GPU_IS_LOST = 15
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.ecc: dict[int, int] = {}
        self.lost: set[int] = set()
        self.no_ecc: set[int] = set()
        self.events: list[_Event] = []
        self.registered: list[int] = []

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index in self.lost:
            raise _NVMLError(15, "GPU is lost")
        return index

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
        assert (kind, counter) == (1, 0)
        if handle in self.no_ecc:
            raise _NVMLError(3, "Not Supported")
        return self.ecc.get(handle, 0)

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlDeviceRegisterEvents(self, handle: int, types: int, events: str) -> None:
        assert types == 8
        self.registered.append(handle)

    def nvmlEventSetWait(self, events: str, timeout_ms: int) -> _Event:
        if not self.events:
            raise _NVMLError(10, "Timeout")
        return self.events.pop(0)


def test_nvml_health_sees_ecc_errors_lost_gpus_and_xids(monkeypatch: pytest.MonkeyPatch) -> None:
    from phalanx.runtime.detect import NvmlHealth

    nvml = _HealthNVML(4)
    nvml.no_ecc.add(3)  # a GPU without ECC is not failed for it
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    check = NvmlHealth()
    assert check() is None
    assert nvml.registered == [0, 1, 2, 3]
    nvml.ecc[2] = 5
    assert check() == ("GPU 2: 5 uncorrected ECC errors", False)
    nvml.ecc.clear()
    assert check() is None
    nvml.lost.add(1)
    assert check() == ("GPU 1 lost: GPU is lost", False)
    nvml.lost.clear()
    nvml.count = 3
    assert check() == ("GPU lost: NVML sees 3 of 4 GPUs", False)
    nvml.count = 4
    # An application's XID (13: graphics engine exception) is not the node's fault;
    # XID 79 is, and lasts: the event is seen once.
    nvml.events += [_Event(0, 13), _Event(2, 79)]
    assert check() == ("GPU 2: XID 79 (GPU has fallen off the bus)", True)
    assert check() is None


def test_nvml_health_without_nvml_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    from phalanx.runtime.detect import NvmlHealth

    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert NvmlHealth()() is None
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML(1, fail_init=True))
    assert NvmlHealth()() is None
