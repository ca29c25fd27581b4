"""On a GPU host (emulated: ``tests/emulated.py``), the plugin costs nothing until a test asks, asks
only what the question needs, keeps CUDA's answers for the boot, and never loses NVML's GPUs to an
optional source that fails.

Sources of the behaviours reproduced:
- CUDA's numbering is the driver API's: ``cuDeviceGet(ordinal)`` is the runtime's device ``ordinal``
  (both apply CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER), and ``torch.cuda.can_device_access_peer`` is
  ``cudaDeviceCanAccessPeer`` (torch 2.13 ``torch/cuda/__init__.py``), i.e. ``cuDeviceCanAccessPeer``.
- torch 2.0's ``_CudaDeviceProperties`` has no ``pci_*`` fields (``torch/csrc/cuda/Module.cpp`` at
  v2.0.1 registers name, major, minor, total_memory, multi_processor_count, is_integrated...), so a
  probe that read them lost every GPU.
- ``torch.cuda.nccl.version()`` is a tuple (major, minor, patch) in 2.0 and gains NCCL's suffix string
  in later releases (``torch/cuda/nccl.py``, 2.13: ``return (major, minor, patch, suffix)``).
- nvidia-ml-py raises ``NVMLError_FunctionNotFound`` for a function the driver's library lacks
  (``pynvml.py``: ``_nvmlGetFunctionPointer`` -> ``NVML_ERROR_FUNCTION_NOT_FOUND``).
"""

import os

import pytest

from emulated import emulated_host, emulated_libs  # noqa: F401  (fixtures)

PLAIN = "def test_one(): pass\ndef test_two(): assert 1 + 1 == 2\n"
P2P = "import pytest\n@pytest.mark.requires_p2p(gpus=2)\ndef test_pair(): pass\n" + PLAIN
PID = "import os\ndef pytest_configure(config):\n    open('pytest.pid', 'w').write(str(os.getpid()))\n"


def _pytest_pid(pytester) -> int:
    return int((pytester.path / "pytest.pid").read_text())


def test_a_run_that_asks_nothing_probes_nothing(pytester, emulated_host):
    host = emulated_host("dgx-a100", torch_import_s=0.5)
    pytester.makepyfile(test_plain=PLAIN)
    result = pytester.runpytest_subprocess("-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["gputopo: no selected test or option asks about the machine: nothing probed"])
    assert host.calls() == []  # no torch import, no nvmlInit, no cuInit: in no process at all


def test_a_run_judged_on_nvmls_facts_imports_only_what_its_verdicts_need(pytester, emulated_host):
    """Issue 32: a run whose markers are judged on NVML's facts (the header, ``requires_gpus`` met and
    unmet) loads none of the judges, the benchmarks and their keys, the run gates, CUDA's view or
    ``packaging`` in the pytest process: each is imported where a run asks for it (docs/performance.md)."""
    emulated_host("dgx-a100")
    pytester.makeconftest("""
import sys
def pytest_sessionfinish(session):
    with open("modules.txt", "w") as f:
        f.write("\\n".join(sorted(m for m in sys.modules if m.startswith(("pytest_gputopo", "packaging")))))
""")
    pytester.makepyfile(
        test_gpus="import pytest\n@pytest.mark.requires_gpus(8, min_memory_gb=80)\n"
        "def test_met(): pass\n@pytest.mark.requires_gpus(16)\ndef test_unmet(): pass\n"
    )
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["gputopo: 8x NVIDIA A100-SXM4-80GB, *(NVML probed)", "*requires_gpus(16): 8 visible*"])
    imported = set((pytester.path / "modules.txt").read_text().split())
    assert {"pytest_gputopo.core.gpu_requirements", "pytest_gputopo.plugin.verdicts"} <= imported  # judged here
    deferred = {
        f"pytest_gputopo.{m}"
        for m in (
            "core.judgement",
            "core.keys",
            "core.thresholds",
            "core.collectives",
            "core.spec",
            "core.expressions",
            "core.regressions",
            "bench.suite",
            "plugin.measurements",
            "probe.cuda_driver",
        )
    } | {"packaging"}
    assert not deferred & imported


@pytest.mark.slow
def test_a_p2p_suite_asks_cuda_once_per_boot_and_never_in_the_pytest_process(pytester, emulated_host):
    host = emulated_host("dgx-a100", torch_import_s=0.5)
    pytester.makeconftest(PID)
    pytester.makepyfile(test_p2p=P2P)
    first = pytester.runpytest_subprocess()
    first.assert_outcomes(passed=3)
    first.stdout.fnmatch_lines(["gputopo: 8x NVIDIA A100-SXM4-80GB, *source NVML (NVML probed; CUDA's view probed)"])
    calls = host.calls()
    assert {"nvmlInit", "cuInit"} <= {call for _, call in calls}
    assert _pytest_pid(pytester) not in {pid for pid, _ in calls}  # NVML and CUDA asked in children only
    assert "import torch" not in {call for _, call in calls}  # peer access needs no torch

    host.forget_calls()
    again = pytester.runpytest_subprocess()
    again.assert_outcomes(passed=3)
    again.stdout.fnmatch_lines(["*source NVML (NVML probed; CUDA's view from this boot's record)"])
    assert {call for _, call in host.calls()} == {"nvmlInit"}  # NVML every run (a link may have gone down)

    host.forget_calls()
    pytester.runpytest_subprocess("--gputopo-reprobe").stdout.fnmatch_lines(["*(NVML probed; CUDA's view probed)"])
    assert "cuInit" in {call for _, call in host.calls()}


def test_cudas_refusal_of_peer_access_is_seen_and_kept_apart_from_nvml(pytester, emulated_host):
    host = emulated_host("dgx-a100")
    host.cuda(nopeer=[(0, 1)])
    pytester.makepyfile(test_p2p=P2P)
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "gputopo warning: GPU0-GPU1: NVML says P2P is OK, CUDA says peer access is impossible",
            "*requires_p2p(gpus=2): GPU0-GPU1 cannot do P2P (CUDA reports no peer access)*",
        ]
    )


@pytest.mark.parametrize(
    "release, cuda, nccl", [("2.0.1", "11.8", "2.14.3"), ("2.4.1", "12.4", "2.20.5"), ("2.13.0", "12.9", "2.27.7")]
)
@pytest.mark.slow
def test_every_torch_release_keeps_nvmls_gpus_and_gives_its_versions(pytester, emulated_host, release, cuda, nccl):
    host = emulated_host("dgx-a100", torch=release)
    pytester.makeconftest(PID)
    pytester.makepyfile(
        test_v=f"""
import pytest
@pytest.mark.requires_gpus(8)
@pytest.mark.requires_p2p(gpus=8)
@pytest.mark.requires_versions(cuda_runtime="=={cuda}", nccl="=={nccl}")
def test_all(gputopo):
    assert len(gputopo.gpus) == 8 and gputopo.nccl_version == "{nccl}"
"""
    )
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["gputopo: 8x NVIDIA A100-SXM4-80GB,*(NVML probed; CUDA's view probed; torch's versions probed)"]
    )
    importers = {pid for pid, call in host.calls() if call == "import torch"}
    assert importers and _pytest_pid(pytester) not in importers  # torch imported by the probe child only


def test_a_failing_libcuda_makes_only_cudas_facts_unknown(pytester, emulated_host):
    host = emulated_host("dgx-a100")
    host.cuda(init_result=999)  # CUDA_ERROR_UNKNOWN, as a driver/library mismatch gives
    pytester.makepyfile(
        test_x="""
import pytest
@pytest.mark.requires_gpus(8)
def test_count(): pass
@pytest.mark.requires_gpus(8, multicast=True)
def test_nvls(): pass
"""
    )
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "gputopo: 8x NVIDIA A100-SXM4-80GB*",
            "gputopo warning: CUDA's view (device order, peer access, multicast) is unknown: cuInit returned "
            "CUDA_ERROR_UNKNOWN (999): unknown error",
            "*requires_gpus(8, multicast=True): *multicast*unknown*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_without_torch_only_torchs_versions_are_unknown(pytester, emulated_host):
    emulated_host("dgx-a100", torch=None)
    pytester.makepyfile(
        test_x="""
import pytest
@pytest.mark.requires_gpus(8)
def test_count(): pass
@pytest.mark.requires_versions(nccl=">=2.18")
def test_nccl(): pass
"""
    )
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "gputopo warning: torch's CUDA and NCCL versions are unknown: torch is not installed",
            "*requires_versions(nccl='>=2.18'): the NCCL torch loads (nccl) is unknown*",
        ]
    )


def test_an_nvml_function_the_driver_lacks_leaves_that_fact_unknown(pytester, emulated_host):
    emulated_host("dgx-a100", nvml_missing=["nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth"])
    pytester.makepyfile(
        test_x="""
import pytest
@pytest.mark.requires_gpus(8, min_memory_gb=80)
def test_count(gputopo):
    assert gputopo.gpus[0].pcie_gen_max is None and gputopo.gpus[0].pcie_width_max is None
"""
    )
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(passed=1)


def test_a_launchers_variables_do_not_make_a_quiet_run_wait_for_ranks(pytester, emulated_host):
    host = emulated_host("dgx-a100")
    pytester.makepyfile(test_plain=PLAIN)
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517"}
    for name, value in env.items():
        os.environ[name] = value  # restored by emulated_host's monkeypatch (it deleted RANK/WORLD_SIZE)
    try:
        result = pytester.runpytest_subprocess("--gputopo-rank-timeout", "5", timeout=60)
    finally:
        for name in env:
            os.environ.pop(name, None)
    result.assert_outcomes(passed=2)
    assert result.ret == 0 and host.calls() == []
