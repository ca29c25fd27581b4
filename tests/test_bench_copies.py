"""The copy benchmarks' GPU code run on the CPU: real tensors, with ``torch.cuda``'s streams and events
replaced by recorders, so that the ordering the staged copy relies on is checked here (the copies
themselves, on real GPUs, are in tests/gpu)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import types
from dataclasses import dataclass

import pytest

from conftest import copy_children as _copy_children
from pytest_gputopo.core import keys

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
            copies = 0  # the copies issued on it so far

            def wait_event(self, event):
                cuda.log.append(("wait", device.index, event.name))

        stream = Stream()
        stream.device = device
        return stream

    def Event(self, enable_timing=False):  # noqa: N802 - torch's name
        cuda = self

        class Event:
            name = f"event{cuda.events}"

            def record(self, stream):
                cuda.log.append(("record", self.name, stream.device.index))
                self.stream, self.copies = stream, stream.copies

            def synchronize(self):
                pass

            def elapsed_time(self, end):  # milliseconds: the copies between, at their stream's pace
                return (end.copies - self.copies) * cuda.copy_ms.get(self.stream.device.index, 1.0)

        cuda.events += 1
        return Event()

    copy_ms: dict = {}  # a copy's time on each GPU's stream, for the event timers

    def stream(self, stream):
        stream.copies += 1
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


def test_bidirectional_copy_verifies_both_directions(monkeypatch):
    """Both directions are verified: data GPU1->GPU0 that come back wrong fail, not only GPU0->GPU1."""
    cuda = FakeCuda()
    fake = cpu_torch(cuda)
    monkeypatch.setitem(sys.modules, "torch", fake)
    real_empty = fake.empty
    buffers = []
    fake.empty = lambda *a, **k: buffers.append(real_empty(*a, **k)) or buffers[-1]

    original = copies.measure

    def measure(name, run, **kw):  # the way back goes wrong after timing, before verification
        verify = kw["verify"]

        def broken():
            buffers[1][7] ^= 0xFF  # the GPU1->GPU0 destination: one byte wrong
            return verify()

        return original(name, run, **{**kw, "verify": broken})

    monkeypatch.setattr(copies, "measure", measure)
    m = copies.p2p_copy(0, 1, bidirectional=True, size_bytes=4096, budget_s=0.05)
    assert not m.verified and "GPU1->GPU0: 1 of 4096 bytes differ" in m.error


def test_both_ways_at_once_is_nvbandwidths_total_the_sum_of_each_directions_rate(monkeypatch):
    """Issue 32 G7: the bidirectional figure is nvbandwidth's ``_total`` (v0.8 testcases_ce.cpp
    DeviceToDeviceBidirWriteCE: ``results[0] + results[1]``, each copy timed by its own stream's
    events in memcpy.cpp doMemcpyCore), so that measured and recorded figures compare: GPU0 -> GPU1
    at 1 ms a copy and GPU1 -> GPU0 at 3 ms give 4096/1 ms + 4096/3 ms, not both directions' bytes
    over the slower one's time (two thirds of it)."""
    cuda = FakeCuda()
    cuda.copy_ms = {0: 1.0, 1: 3.0}
    monkeypatch.setitem(sys.modules, "torch", cpu_torch(cuda))
    m = copies.p2p_copy(0, 1, bidirectional=True, size_bytes=4096, budget_s=0.05)
    assert m.verified
    assert m.bw_gbps == pytest.approx(4096 / 1e-3 / 1e9 + 4096 / 3e-3 / 1e9)
    # the second direction starts when the first does (nvbandwidth: cuStreamWaitEvent on startEvents[0])
    assert ("wait", 1, "event0") in cuda.log and ("record", "event0", 0) in cuda.log


@pytest.mark.slow
def test_no_peer_access_is_no_p2p_figure(monkeypatch):
    """Without CUDA peer access torch does not enable it (at::cuda::get_p2p_access asks
    cudaDeviceCanAccessPeer, aten/src/ATen/cuda/PeerToPeerAccess.cpp) and the driver stages the
    copy through the host; that figure is no P2P figure, so nothing is measured as P2P then."""

    cuda = FakeCuda()
    cuda.can_device_access_peer = lambda a, b: False
    monkeypatch.setitem(sys.modules, "torch", cpu_torch(cuda))
    from pytest_gputopo.bench import subproc

    answer = copies.answer(subproc.CopyRequest(keys.Copy("p2p", 0, 1), 0.05))
    assert answer.detail() == {"peer_access": False, "bw_gbps": None, "worker_pid": os.getpid()}

    from pytest_gputopo.bench.suite import BenchSettings, BenchSuite
    from pytest_gputopo.core import model

    monkeypatch.setattr(subproc.CopyWorker, "measure", lambda *a, **k: subproc.CopyAnswer(1, None, peer_access=False))
    host = model.Topology(gpus=(model.Gpu(0), model.Gpu(1)), links=(model.Link(0, 1),), source=model.Source("nvml"))
    result = BenchSuite(host, BenchSettings()).get(keys.Copy("p2p", 0, 1))
    assert result.gbps is None and "no CUDA peer access between GPU0 and GPU1" in result.error


THIS_HOST = """
import dataclasses, os
import pytest
from pytest_gputopo.core import model

@pytest.hookimpl(tryfirst=True)
def pytest_gputopo_probe(config):
    from pytest_gputopo.probe import probe_recorded
    topo = probe_recorded("hgx-h100")
    return dataclasses.replace(topo, source=model.Source("nvml"), published=())
"""


@pytest.mark.slow
def test_the_full_check_measures_every_copy_of_8_gpus_in_one_process(pytester, monkeypatch):
    """One child answers a burst of copies, not a fresh child importing torch per copy (108 copies on
    8 GPUs, each paying a torch import and a CUDA start-up). The child's
    measurement is replaced by the test plan (runtime.environ.test_faults), so that this runs
    without a GPU: an 8-GPU machine passes for this host, and every copy reports its child's pid."""
    monkeypatch.setenv("PYTEST_GPUTOPO_TEST_FAULTS", '{"copy_gbps": 20.0}')
    # A benchmark lock of its own (it lives in $TMPDIR): other runs of this suite hold the shared one
    # for seconds, and a wait beyond the child's idle time would start a second child, rightly.
    monkeypatch.setenv("TMPDIR", str(pytester.mkdir("tmp")))
    pytester.makeconftest(THIS_HOST)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--gputopo-check=full",
        "--gputopo-json",
        "out.json",
        "-k",
        "p2p_bw or p2p_bidir_bw or h2d or d2h",
    )
    doc = json.loads((pytester.path / "out.json").read_text())
    copies = [m for m in doc["measurements"] if m["key"][0] != "allreduce"]
    assert len(copies) == 2 * 28 + 28 + 3 * 8, result.stdout.str()[-2000:]  # one way each way, both at once
    assert {m["detail"]["worker_pid"] for m in copies} == {copies[0]["detail"]["worker_pid"]}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.slow
def test_a_hung_copy_ends_at_its_deadline_and_the_next_copy_gets_a_new_child(monkeypatch):
    from pytest_gputopo.bench.subproc import CopyWorker
    from pytest_gputopo.core import model
    from pytest_gputopo.runtime.procs import BenchTimeout

    host = model.Topology(gpus=(model.Gpu(0), model.Gpu(1)), links=(model.Link(0, 1),), source=model.Source("nvml"))
    worker = CopyWorker()
    monkeypatch.setenv("PYTEST_GPUTOPO_TEST_FAULTS", '{"copy_hang": true}')
    with pytest.raises(BenchTimeout, match="did not answer within 2 s; it was killed"):
        worker.measure(keys.Copy("p2p", 0, 1), host, budget_s=0.1, timeout_s=2)
    assert _copy_children() == []  # killed and reaped: no orphan, no zombie
    monkeypatch.setenv("PYTEST_GPUTOPO_TEST_FAULTS", '{"copy_gbps": 7.5}')
    try:
        assert worker.measure(keys.Copy("p2p", 0, 1), host, budget_s=0.1, timeout_s=60).bw_gbps == 7.5
    finally:
        worker.close()
    assert _copy_children() == []
