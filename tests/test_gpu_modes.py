"""A GPU's MIG mode and compute mode: read through NVML, carried by the
model and the profile format, served by the fake NVML, and heeded by judgement and the benchmarks.

NVML functions, as the installed nvidia-ml-py (13.615.71, ``pynvml.py``) defines them:

- ``nvmlDeviceGetMigMode(device)`` (l.6089): ``[c_currentMode.value, c_pendingMode.value]``, a list of
  ``NVML_DEVICE_MIG_DISABLE (0)`` / ``NVML_DEVICE_MIG_ENABLE (1)`` (l.2794-2795); NOT_SUPPORTED on a GPU
  without MIG (nvml.h, reference nvml-nccl-torch.md §1.4);
- ``nvmlDeviceGetComputeMode(handle)`` (l.4012): ``c_mode.value``, an int ``NVML_COMPUTEMODE_*``:
  DEFAULT 0, EXCLUSIVE_THREAD 1 ("Support Removed"), PROHIBITED 2, EXCLUSIVE_PROCESS 3 (l.88-91).

A driver older than a function raises NVML_ERROR_FUNCTION_NOT_FOUND (``_nvmlGetFunctionPointer``,
l.1136): the fact is unknown, never an error.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import pynvml
import pytest

from conftest import copy_children as _copy_children
from fake_nvml import make_fake_pynvml
from pytest_gputopo.core import keys, model, schema
from pytest_gputopo.core.fact_requirements import TransportRequirement
from pytest_gputopo.core.gpu_requirements import GpuRequirement
from pytest_gputopo.core.requirements import LinkRequirement, NvLinkRequirement, P2PRequirement
from pytest_gputopo.probe import nvml

OK = model.P2PStatus.OK
A100 = "NVIDIA A100-SXM4-80GB"
A100_BYTES = 85_899_345_920


def _box(mig=(None, None), modes=(None, None), source="recorded") -> model.Topology:
    """Two A100s joined by 12 NVLinks, P2P OK."""
    gpus = tuple(
        model.Gpu(
            i,
            name=A100,
            pci_bus_id=f"00000000:{0x07 + 0x10 * i:02X}:00.0",
            nvml_index=i,
            memory_total_bytes=A100_BYTES,
            compute_capability="8.0",
            mig=mig[i],
            compute_mode=modes[i],
            nvlinks=tuple(
                model.NvLink(k, True, f"00000000:{0x17 - 0x10 * i:02X}:00.0", "GPU", "3.0") for k in range(12)
            ),
        )
        for i in range(2)
    )
    return model.Topology(
        gpus=gpus,
        links=(model.Link(0, 1, pcie=model.LinkClass.SYS, nvlinks=12, p2p=model.P2P(OK, OK, OK, OK)),),
        source=model.Source(source),
        driver_version="550.54.15",
    )


# -- NVML: the probe reads both modes -------------------------------------------------------------


@pytest.mark.parametrize("mig", [True, False, None])
@pytest.mark.parametrize("mode", [*model.COMPUTE_MODES, None])
def test_the_probe_reads_mig_and_compute_mode(mig, mode):
    got = nvml.probe(make_fake_pynvml(_box(mig=(mig, None), modes=(mode, "Default"))))
    assert (got.gpus[0].mig, got.gpus[0].compute_mode) == (mig, mode)
    assert (got.gpus[1].mig, got.gpus[1].compute_mode) == (None, "Default")
    assert got.warnings == ()


def test_the_current_mig_mode_counts_not_the_pending_one():
    """MIG mode changes at the next GPU reset: until then the current mode is in force."""
    fake = make_fake_pynvml(_box())
    fake.nvmlDeviceGetMigMode = lambda device: [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_DISABLE]
    assert [g.mig for g in nvml.probe(fake).gpus] == [True, True]
    fake.nvmlDeviceGetMigMode = lambda device: [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE]
    assert [g.mig for g in nvml.probe(fake).gpus] == [False, False]


def test_compute_mode_values_are_nvmls():
    assert [getattr(pynvml, f"NVML_COMPUTEMODE_{m.upper()}") for m in model.COMPUTE_MODES] == [0, 1, 2, 3]
    fake = make_fake_pynvml(_box())
    fake.nvmlDeviceGetComputeMode = lambda handle: 7  # a mode this plugin does not know: unknown
    assert nvml.probe(fake).gpus[0].compute_mode is None


@pytest.mark.parametrize("how", ["function not found", "binding lacks it"])
def test_an_older_driver_or_binding_leaves_both_unknown_without_a_warning(how):
    fake = make_fake_pynvml(_box(mig=(True, True), modes=("Prohibited", "Prohibited")))
    for name in ("nvmlDeviceGetMigMode", "nvmlDeviceGetComputeMode"):
        if how == "binding lacks it":
            delattr(fake, name)
        else:

            def missing(handle):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)  # _nvmlGetFunctionPointer's error

            setattr(fake, name, missing)
    got = nvml.probe(fake)
    assert [(g.mig, g.compute_mode) for g in got.gpus] == [(None, None)] * 2
    assert got.warnings == () and got.gpus[0].memory_total_bytes == A100_BYTES


# -- the profile format ---------------------------------------------------------------------------


def test_the_profile_carries_both_and_refuses_what_nvml_cannot_say():
    t = _box(mig=(True, False), modes=("Exclusive_Process", None))
    d = schema.to_dict(t)
    assert (d["gpus"][0]["mig"], d["gpus"][0]["compute_mode"]) == (True, "Exclusive_Process")
    assert schema.from_dict(json.loads(json.dumps(d))).gpus == t.gpus
    d["gpus"][0]["compute_mode"] = "exclusive"
    with pytest.raises(schema.SchemaError, match=r"gpus\[0\]\.compute_mode: 'exclusive' is not one of"):
        schema.from_dict(d)
    d["gpus"][0]["compute_mode"], d["gpus"][0]["mig"] = None, "yes"
    with pytest.raises(schema.SchemaError, match=r"gpus\[0\]\.mig: expected bool"):
        schema.from_dict(d)


# -- judgement: the whole GPU's facts are unknown under MIG ---------------------------------------


def test_a_mig_enabled_gpu_has_no_memory_fact_for_judgement():
    """CUDA reports a MIG instance with the parent's bus id, so min_memory_gb is not judged on the
    80 GB GPU for a 10 GB slice: memory is unknown, the requirement unmet."""
    verdict = GpuRequirement(1, min_memory_gb=10).evaluate(_box(mig=(True, None)))
    assert not verdict.ok
    assert verdict.reason == (
        "requires_gpus(1, min_memory_gb=10): GPU0 (NVIDIA A100-SXM4-80GB) memory is unknown: "
        "MIG is enabled (a process sees a MIG instance, never the whole GPU, which has a "
        "slice of the GPU's 85.9 GB)"
    )
    assert GpuRequirement(1, min_memory_gb=10).evaluate(_box(mig=(False, None))).ok
    assert GpuRequirement(1, min_memory_gb=10).evaluate(_box()).ok  # NVML did not say: judged as before
    assert GpuRequirement(1, compute_capability=">=8.0").evaluate(_box(mig=(True, None))).ok  # an instance's too


@pytest.mark.parametrize(
    "req", [P2PRequirement(), NvLinkRequirement(min_links=12), LinkRequirement(need="NV12")], ids=str
)
def test_a_pair_with_a_mig_enabled_gpu_has_no_link_or_p2p_for_judgement(req):
    assert req.evaluate(_box()).ok
    verdict = req.evaluate(_box(mig=(None, True)))
    assert not verdict.ok
    assert verdict.failures == (
        "GPU0-GPU1 link and P2P are unknown: GPU1 has MIG enabled (a process sees a MIG instance, never the whole GPU)",
    )


def test_nccls_view_of_a_pair_with_a_mig_enabled_gpu_is_unknown():
    req = TransportRequirement(kind="P2P")
    pairs = {(0, 1): ({"P2P/CUMEM"}, "")}
    assert req.judge(_box(), pairs, None).ok
    verdict = req.judge(_box(mig=(True, True)), pairs, None)
    assert not verdict.ok and "GPU0 and GPU1 have MIG enabled" in verdict.reason


def test_a_run_on_a_recorded_machine_with_mig_skips_with_a_reason(pytester):
    """End to end: the profile's MIG mode goes through the fake NVML and the probe to the verdicts."""
    from pytest_gputopo.probe.recorded import profile_dict

    path = pytester.path / "a100-mig.json"
    path.write_text(json.dumps(profile_dict("a100-mig", _box(mig=(True, False)))))
    pytester.makepyfile("""
        import pytest

        @pytest.mark.requires_gpus(1, min_memory_gb=10)
        def test_memory():
            pass

        @pytest.mark.requires_nvlink(gpus=2)
        def test_nvlink():
            pass

        @pytest.mark.requires_gpus([1], min_memory_gb=10)
        def test_whole_gpu():
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", str(path), "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*GPU0 (NVIDIA A100-SXM4-80GB) memory is unknown: MIG is enabled*",
            "*GPU0-GPU1 link and P2P are unknown: GPU0 has MIG enabled*",
        ]
    )


def test_the_health_check_does_not_judge_a_mig_gpus_nvlinks_or_p2p(pytester):
    """MIG instances do no P2P, PCIe or NVLink (NVIDIA's MIG user guide): a refused P2P status or a
    link state on a MIG-enabled GPU is no fault of the node, so the quick check skips them saying so,
    and still judges the GPU beside it."""
    from pytest_gputopo.probe.recorded import profile_dict

    box = _box(mig=(True, False))
    refused = model.P2P(model.P2PStatus.NOT_SUPPORTED, model.P2PStatus.NOT_SUPPORTED, OK, OK)
    box = dataclasses.replace(box, links=(dataclasses.replace(box.links[0], p2p=refused),))
    path = pytester.path / "a100-mig.json"
    path.write_text(json.dumps(profile_dict("a100-mig", box)))
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", str(path), "--gputopo-check")
    result.stdout.fnmatch_lines(
        [
            "SKIPPED nvlink[[]GPU0]: MIG enabled: its NVLinks are not used by a MIG instance, not judged",
            "SKIPPED p2p_status[[]GPU0-GPU1]: MIG enabled: no P2P under MIG, not judged",
        ]
    )
    assert result.ret == 0


# -- benchmarks: MIG and compute modes --------------------------------------------------------------


def _suite(topology, monkeypatch):
    from pytest_gputopo.bench import subproc
    from pytest_gputopo.bench.suite import BenchSettings, BenchSuite

    def never(*args, **kwargs):
        raise AssertionError("nothing may be measured here")

    monkeypatch.setattr(subproc.CopyWorker, "measure", never)
    return BenchSuite(topology, BenchSettings())


@pytest.mark.parametrize(
    "key",
    [keys.Copy("p2p", 0, 1), keys.HostCopy("h2d", 1, True), keys.AllReduce(2, 2**20), keys.NcclTransports(2)],
    ids=keys.name_of,
)
def test_a_prohibited_gpu_is_never_measured_and_says_why(key, monkeypatch):
    """NVML_COMPUTEMODE_PROHIBITED lets no process create a CUDA context: no figure, unknown."""
    result = _suite(_box(modes=("Default", "Prohibited"), source="nvml"), monkeypatch).get(key)
    assert result.gbps is None and result.origin == "measured"
    assert result.error == (
        "cannot measure: GPU1 is in compute mode Prohibited (NVML_COMPUTEMODE_PROHIBITED): "
        "no process may create a CUDA context"
    )


def test_a_mig_enabled_gpu_gets_no_figure_measured_or_published(monkeypatch):
    for source in ("nvml", "recorded"):
        t = dataclasses.replace(
            _box(mig=(True, None), source=source),
            published=({"kind": "h2d", "gbps": 24.0, "source": "a vendor sheet"},),
        )
        result = _suite(t, monkeypatch).get(keys.HostCopy("h2d", 0, True))
        assert result.gbps is None
        assert result.error.startswith("unknown: GPU0 has MIG enabled (a process sees a MIG instance")


def test_a_bandwidth_marker_on_a_prohibited_gpu_is_never_met(monkeypatch):
    from pytest_gputopo.core.fact_requirements import BandwidthRequirement
    from pytest_gputopo.core.judgement import ABSENT, Judgement, Measured, Threshold

    result = _suite(_box(modes=("Prohibited", "Prohibited"), source="nvml"), monkeypatch).get(keys.Copy("p2p", 0, 1))
    judged = Judgement(
        Measured(result.gbps, result.origin, result.what, result.source, result.error), Threshold(None, "", 0.8)
    )
    assert judged.state == ABSENT
    verdict = BandwidthRequirement(metric="p2p", gbps=10).judge(_box(), [judged])
    assert not verdict.ok and "compute mode Prohibited" in verdict.reason


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("mode", ["Exclusive_Process", "Exclusive_Thread"])
def test_no_copy_child_outlives_a_copy_on_an_exclusive_gpu(mode, monkeypatch):
    """On EXCLUSIVE_PROCESS the copy child does not stay after a burst (bench.subproc.IDLE_S) with its
    CUDA context, which would fail the user's next test "all CUDA-capable devices are busy". The child's
    measurement is replaced by the tests' fault plan (runtime.environ.test_faults): no GPU needed."""
    from pytest_gputopo.bench.subproc import CopyWorker

    monkeypatch.setenv("PYTEST_GPUTOPO_TEST_FAULTS", '{"copy_gbps": 7.5}')
    worker = CopyWorker()
    try:
        default = _box(modes=("Default", "Default"), source="nvml")
        assert worker.measure(keys.Copy("p2p", 0, 1), default, budget_s=0.1, timeout_s=60).bw_gbps == 7.5
        assert len(_copy_children()) == 1  # a default GPU: the child waits for the rest of the burst
        exclusive = _box(modes=("Default", mode), source="nvml")
        assert worker.measure(keys.Copy("p2p", 0, 1), exclusive, budget_s=0.1, timeout_s=60).bw_gbps == 7.5
        assert _copy_children() == []  # ended and reaped with its answer
        assert worker.measure(keys.HostCopy("h2d", 1, True), exclusive, budget_s=0.1, timeout_s=60).bw_gbps == 7.5
        assert _copy_children() == []
    finally:
        worker.close()
