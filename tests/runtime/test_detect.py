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
