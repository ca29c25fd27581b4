"""The copy benchmarks' GPU code run on the CPU: real tensors, with ``torch.cuda``'s streams and events
replaced by recorders, so that the ordering the staged copy relies on is checked here (the copies
themselves, on real GPUs, are in tests/gpu)."""

from __future__ import annotations

import contextlib
import sys
import types
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")

from pytest_gputopo.bench import copies  # noqa: E402


@dataclass(frozen=True)
class FakeDevice:
    type: str
    index: int


class FakeCuda:
    """Streams and events that record what is asked of them, per GPU index."""

    def __init__(self) -> None:
        self.log: list = []
        self.events = 0
        self._current: dict = {}

    def current_stream(self, device):
        return self._current.setdefault(device.index, self.Stream(device))

    def Stream(self, device):  # noqa: N802 - torch's name
        cuda = self

        class Stream:
            def wait_event(self, event):
                cuda.log.append(("wait", device.index, event.name))

        stream = Stream()
        stream.device = device
        return stream

    def Event(self):  # noqa: N802 - torch's name
        cuda = self

        class Event:
            name = f"event{cuda.events}"

            def record(self, stream):
                cuda.log.append(("record", self.name, stream.device.index))

        cuda.events += 1
        return Event()

    def stream(self, stream):
        return contextlib.nullcontext()

    def synchronize(self, device=None):
        pass


def cpu_torch(cuda: FakeCuda):
    """torch, with GPUs played by the CPU: device("cuda", i) names a GPU, its tensors live on the CPU."""
    def on_cpu(kwargs):
        kwargs.pop("pin_memory", None)
        if isinstance(kwargs.get("device"), FakeDevice):
            kwargs["device"] = "cpu"
        return kwargs

    return types.SimpleNamespace(
        uint8=torch.uint8,
        device=lambda kind, index=None: FakeDevice(kind, index),
        empty=lambda *a, **k: torch.empty(*a, **on_cpu(k)),
        arange=lambda *a, **k: torch.arange(*a, **on_cpu(k)),
        cuda=cuda,
    )


def test_staged_copy_orders_both_gpus_through_the_host_buffer(monkeypatch):
    cuda = FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", cpu_torch(cuda))
    m = copies.p2p_copy(0, 1, peer=False, size_bytes=4096, budget_s=0.05)
    assert m.verified and m.error is None
    filled, drained = "event0", "event1"
    steps = cuda.log
    iteration = [("record", filled, 0), ("wait", 1, filled), ("record", drained, 1), ("wait", 0, drained)]
    assert len(steps) % 4 == 0 and steps == iteration * (len(steps) // 4)
    assert len(steps) // 4 >= m.warmup + len(m.samples_s) * m.iterations_per_sample


def test_p2p_copy_needs_no_ordering_of_its_own(monkeypatch):
    cuda = FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", cpu_torch(cuda))
    m = copies.p2p_copy(0, 1, size_bytes=4096, budget_s=0.05)
    assert m.verified
    assert cuda.log == []  # torch orders a device-to-device copy itself
