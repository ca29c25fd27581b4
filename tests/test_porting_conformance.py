"""docs/porting.md stays true: every row's port, run on every bundled machine, decides as the original
helper does there, or differs only where the doc says it differs.

Each original helper's rule is a small function over a recorded machine's facts (``core.model``),
written from its source (cited at each function). It returns True (the original runs the test),
False (it skips) or None (the machine's record lacks the fact the original reads, or the original
errors there instead of deciding). Our port is the row's markers, judged as the plugin judges them
(``plugin.markers.from_marker`` and ``Requirement.evaluate``, what ``plugin.verdicts.evaluate`` calls
on each node), and ``test_the_plugin_decides_each_port_as_judged_here`` runs them through pytest. A
helper no marker says has a predicate for ``gputopo_ranks.require`` on the page (``PREDICATE_ROWS``),
checked the same way.

Sources (read for this file):
- TRT = NVIDIA/TensorRT-LLM tests/integration/defs/conftest.py @ 008396338708c96bc35a02875083f34c4ef6f587
- TRT_UT = NVIDIA/TensorRT-LLM tests/unittest/utils/util.py @ 0249976575050d2c624a5f285683c66de311a3b7
- TRT_NVLS = NVIDIA/TensorRT-LLM cpp/tensorrt_llm/runtime/ipcNvlsMemory.cu @ 13c3179bbeeaa6cfc791b20dbf5c035591cfbeea
- DS = deepspeedai/DeepSpeed tests/unit/common.py, tests/unit/util.py, accelerator/cuda_accelerator.py
  @ edaa7221267243c7be7fb49c5d5f5c4fb97b4641
- PL = Lightning-AI/pytorch-lightning src/lightning/fabric/utilities/testing/_runif.py
  @ 7f0c3436cd3f6ad3753125672024fc415cbcb414
- torch.cuda.is_bf16_supported (torch/cuda/__init__.py, torch >= 2.4): True when the current device's
  major capability is 8 or more; else, by default (``including_emulation=True``), whether a bf16
  tensor can be made on it, which any CUDA GPU can.
- skip_if_lt_x_gpu: pytorch/pytorch torch/testing/_internal/common_distributed.py
  @ 4214bd808e136baec1e6aad7c16f975772370aca (current releases ask ``torch.accelerator`` the same).
- TORCH = pytorch/pytorch torch/testing/_internal/common_distributed.py as mirrored in cyyever/pytorch
  @ 030e7a85ece9d9844a1c3927239321e6c35f1ade: requires_multicast_support, requires_nccl_version (since
  ``if not TEST_CUDA: return lambda f: f``; at 4214bd80 it compared the version without a GPU too),
  requires_nccl_shrink (``requires_nccl_version((2, 27), ...)``) and sm_is_or_higher_than.
- torch.cuda.nccl.version (torch/cuda/nccl.py, as mirrored in rec/pytorch
  @ 1bcd41f8c59821a369586aa85c87a8bb22fbcae3): ``ncclGetVersion`` as the tuple (major, minor, patch),
  with NCCL's suffix string appended when it has one.
- MultiProcessTestCase: the same file @ 4214bd80: ``setUp`` spawns ``world_size`` processes
  (``_spawn_processes``) whatever the machine; a GPU condition is the test's own ``skip_if_lt_x_gpu``.
- requires_cuda_p2p_access: pytorch/pytorch test/distributed/test_symmetric_memory.py (its own copy
  in earlier versions; torch.testing._internal.common_utils at d4e76bf597ca217a95c3d75678b317a4f99e0647).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_gputopo.core import hardware
from pytest_gputopo.core.model import Topology
from pytest_gputopo.plugin.markers import from_marker
from pytest_gputopo.probe import probe
from pytest_gputopo.probe.recorded import bundled_names

DOC = Path(__file__).resolve().parents[1] / "docs" / "porting.md"
MACHINES = bundled_names()


# ---------------------------------------------------------------------------------------------
# The originals' facts, read from a recorded machine


def gpu0(t: Topology):
    return t.gpus[0] if t.gpus else None


def sm(t: Topology) -> int | None:
    """TRT's ``get_sm_version`` / ``getSMVersion``: major * 10 + minor of device 0."""
    cc = hardware.capability(gpu0(t).compute_capability) if t.gpus else None
    return None if cc is None else cc[0] * 10 + cc[1]


def major(t: Topology) -> int | None:
    cc = hardware.capability(gpu0(t).compute_capability) if t.gpus else None
    return None if cc is None else cc[0]


def smi_list_line(t: Topology) -> str | None:
    """GPU0's line of ``nvidia-smi -L``: ``GPU 0: <name> (UUID: <uuid>)``."""
    g = gpu0(t)
    if g is None or g.name is None:
        return None
    return f"GPU 0: {g.name}" + (f" (UUID: {g.uuid})" if g.uuid else "")


def version_tuple(text: str | None, parts: int = 2) -> tuple[int, ...] | None:
    v = hardware.version(text)
    return None if v is None else tuple((list(v.release) + [0] * parts)[:parts])


# ---------------------------------------------------------------------------------------------
# The originals' rules


def torch_bf16(t: Topology) -> bool | None:
    """``torch.cuda.is_bf16_supported()`` on the current device (cuda:0): False without CUDA; True
    natively from capability 8.0, and by emulation (a bf16 tensor can be made) on any other GPU."""
    if not t.gpus:
        return False
    return None if major(t) is None else True


def pl_min_cuda_gpus(n):  # PL: num_cuda_devices() < min_cuda_gpus -> skip
    return lambda t: len(t.gpus) >= n


def pl_bf16_cuda(t):  # PL: not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()) -> skip
    return torch_bf16(t)


def ds_world_size(n):
    """DS common.py: ``requires_cuda_env`` (True by default) skips without an accelerator;
    ``_launch_procs`` skips when ``device_count() < num_procs``."""
    return lambda t: bool(t.gpus) and len(t.gpus) >= n


def ds_skip_on_arch(min_arch):
    """DS util.py: ``torch.cuda.get_device_capability()[0] < min_arch`` -> skip (no GPU: it raises)."""
    return lambda t: None if major(t) is None else major(t) >= min_arch


def ds_bf16_required_version_check(t):
    """DS util.py: torch >= 1.10, CUDA major >= 11, NCCL (major, minor) >= (2, 10), and the
    accelerator's ``is_bf16_supported`` (cuda_accelerator.py: True without CUDA, else torch's)."""
    cuda, nccl = version_tuple(t.cuda_runtime_version), version_tuple(t.nccl_version)
    if cuda is None or nccl is None:
        return None
    bf16 = True if not t.gpus else torch_bf16(t)
    return None if bf16 is None else (cuda[0] >= 11 and nccl >= (2, 10) and bf16)


def ds_skip_on_cuda(valid):
    """DS util.py: ``major * 10 + minor`` of torch's CUDA must be in ``valid``."""

    def rule(t):
        cuda = version_tuple(t.cuda_runtime_version)
        return None if cuda is None else cuda[0] * 10 + cuda[1] in valid

    return rule


def trt_device_count(t) -> int | None:
    """TRT: ``len(nvidia-smi -L lines)``; without a GPU nvidia-smi fails and the fixture errors."""
    return len(t.gpus) or None


def trt_skip_less_device(n):
    return lambda t: None if trt_device_count(t) is None else trt_device_count(t) >= n


def trt_skip_less_mpi_world_size(n):
    """TRT: with an MPI world of 1 (pytest not under mpirun), the device count as above."""
    return trt_skip_less_device(n)


def trt_skip_less_device_memory(mib):
    """TRT: the first number of ``nvidia-smi --query-gpu=memory.total --format=csv,noheader`` (GPU0,
    in MiB: bytes // 2**20) must be at least ``mib`` (N/A: the host's memory, not known here)."""

    def rule(t):
        g = gpu0(t)
        if g is None or g.memory_total_bytes is None:
            return None
        return g.memory_total_bytes // 2**20 >= mib

    return rule


def trt_skip_gpu_memory_less_than(nbytes):
    """TRT_UT: ``torch.cuda.get_device_properties(0).total_memory`` (bytes) must be at least
    ``nbytes``; the record's NVML total stands for it."""

    def rule(t):
        g = gpu0(t)
        return None if g is None or g.memory_total_bytes is None else g.memory_total_bytes >= nbytes

    return rule


def trt_skip_num_gpus_less_than(n):  # TRT_UT: torch.cuda.device_count() < n -> skip
    return lambda t: len(t.gpus) >= n


def trt_sm(test: Callable[[int], bool]):
    """TRT / TRT_UT: a test of GPU0's SM number (no GPU: the module fails to import)."""
    return lambda t: None if sm(t) is None else test(sm(t))


def trt_skip_device_not_contain(keywords):
    """TRT: ``any(keyword in <GPU0's nvidia-smi -L line>)``, case-sensitive."""

    def rule(t):
        line = smi_list_line(t)
        return None if line is None else any(k in line for k in keywords)

    return rule


def trt_skip_device_contain(keywords):
    """TRT ``skip_device_contain_gb200``: ``check_device_contain(["GB200"])`` (a keyword in GPU0's
    ``nvidia-smi -L`` line, case-sensitive) skips."""
    contains = trt_skip_device_not_contain(keywords)
    return lambda t: None if contains(t) is None else not contains(t)


def trt_skip_no_nvls(t):
    """TRT_NVLS ``ipcNvlsSupported``: the driver's CUDA >= 12010, then, ``device_count`` times, the
    multicast attribute of ``cudaGetDevice()``: the current device (cuda:0) each time."""
    driver = version_tuple(t.cuda_driver_version)
    if driver is not None and driver < (12, 1):
        return False
    g = gpu0(t)
    if g is None or g.multicast is None:
        return None
    if not g.multicast:
        return False
    return None if driver is None else True


def trt_skip_nvlink_inactive(t):
    """TRT ``check_nvlink``: ``nvidia-smi nvlink -s -i 0`` failing (no GPU), printing nothing, or
    printing "inActive" skips. GPU0's header line is always printed; "inActive" is only in the line
    for a GPU whose links are all down (one link down prints ``<inactive>``); a GPU without NVLink
    prints its header alone, so the test runs."""
    g = gpu0(t)
    if g is None:
        return False
    if g.nvlinks:
        return any(link.active for link in g.nvlinks)
    nvlinked = [ln.nvlinks for ln in t.links if 0 in (ln.a, ln.b)]
    if any(n is None or n > 0 for n in nvlinked):
        return None  # GPU0 has NVLinks whose states this record does not give
    return True


def trt_ut_check_nvlink(t):
    """TRT_UT ``check_nvlink``: True whenever NVML starts (it prints link 0's state and skips on
    nothing); a machine without a GPU may or may not have the driver."""
    return True if t.gpus else None


def torch_skip_if_lt_x_gpu(x):  # torch.cuda.is_available() and torch.cuda.device_count() >= x runs it
    return lambda t: bool(t.gpus) and len(t.gpus) >= x


def torch_requires_multicast_support(t):
    """``torch.cuda.is_available() and _SymmetricMemory.has_multicast_support(DeviceType.CUDA, 0)``:
    device 0's multicast attribute stands for the latter (its C++ side is not encoded here)."""
    if not t.gpus:
        return False
    return gpu0(t).multicast


def torch_requires_nccl_version(version: tuple):
    """TORCH ``requires_nccl_version(version, msg)``: without CUDA (``TEST_CUDA`` false) it returns the
    test undecorated, so the test runs; else ``torch.cuda.nccl.version() < version`` skips (tuples:
    (2, 18, 0) is not below (2, 18); the suffix NCCL may append follows the patch, so it never
    decides)."""

    def rule(t):
        if not t.gpus:
            return True
        nccl = version_tuple(t.nccl_version, 3)
        return None if nccl is None else not nccl < version

    return rule


def torch_sm_is_or_higher_than(major_: int, minor_: int):
    """TORCH ``sm_is_or_higher_than(device, major, minor)`` on the rank's CUDA device (GPU0 for rank 0):
    ``torch.cuda.get_device_capability(device) >= (major, minor)``, tuples; without a GPU
    ``get_device_capability`` raises and the test errors. (ROCm: False; a device not CUDA: True.)"""

    def rule(t):
        cc = hardware.capability(gpu0(t).compute_capability) if t.gpus else None
        return None if cc is None else cc >= (major_, minor_)

    return rule


def torch_requires_cuda_p2p_access(t):
    """CUDA available, at least 2 GPUs, ``can_device_access_peer(i, j)`` for every pair (some
    versions also ask ``get_device_capability() >= (8, 0)``)."""
    if len(t.gpus) < 2:
        return False
    answers = [ln.cuda_peer for ln in t.pairs()]
    if False in answers:
        return False
    return None if None in answers else True


# ---------------------------------------------------------------------------------------------
# Documented differences: where, on a machine, the port may decide otherwise than the original


def used_pair_without_nvlink(t: Topology) -> bool:
    """requires_nvlink judges every pair of the GPUs used (at least one pair), not GPU0's links."""
    return len(t.gpus) < 2 or any(not ln.nvlinks for ln in t.pairs())


def bf16_emulated(n: int = 1):
    """bf16=True is native bf16 (capability 8.0+); torch also counts emulated bf16."""

    def where(t):
        return any((hardware.capability(g.compute_capability) or (99, 0)) < hardware.BF16_FROM for g in t.gpus[:n])

    return where


def without_gpu(t: Topology) -> bool:
    """requires_nccl_version applies no condition without CUDA; the marker needs the NCCL version."""
    return not t.gpus


def cuda_peer_unrecorded(t: Topology) -> bool:
    """requires_p2p joins NVML's P2P status with CUDA's answer; the original asks CUDA alone."""
    return any(ln.cuda_peer is None for ln in t.pairs())


def capability_not_in_table(t: Topology) -> bool:
    """``arch`` names an architecture from the capability table; a capability it does not list has
    no name there (``compute_capability`` compares it by number)."""
    return bool(t.gpus) and hardware.architecture(gpu0(t).compute_capability) is None


def case_or_line(keywords):
    """model= ignores case and reads the name alone; the original reads GPU0's whole ``nvidia-smi -L``
    line (its "GPU 0:" and UUID included), case-sensitively."""

    def where(t):
        line, name = smi_list_line(t), gpu0(t).name if t.gpus else None
        if line is None or name is None:
            return False
        return any((k.lower() in name.lower()) != (k in line) for k in keywords)

    return where


# ---------------------------------------------------------------------------------------------
# The rows: the original as the doc names it, its rule, the port as the doc writes it


@dataclass(frozen=True)
class Row:
    original: str  # as docs/porting.md writes it
    rule: Callable[[Topology], bool | None]
    port: tuple[str, ...]  # each marker as docs/porting.md writes it
    differs: Callable[[Topology], bool] | None = None  # where a documented difference may decide otherwise
    why: str = ""  # the doc's words for the difference (each must be on the page)
    id: str = field(default="")

    def __str__(self) -> str:
        return self.id or self.original


def capability_row(original: str, test: Callable[[int], bool], capability: str, id: str) -> Row:
    """A TensorRT-LLM SM gate ported as ``requires_gpus(compute_capability=...)``."""
    return Row(original, trt_sm(test), (f'@pytest.mark.requires_gpus(compute_capability="{capability}")',), id=id)


def memory_row(original: str, gb: int, id: str) -> Row:
    """A TensorRT-LLM ``skip_gpu_memory_less_than`` of ``gb`` GB ported as ``requires_gpus(min_memory_gb=...)``."""
    port = f"@pytest.mark.requires_gpus(min_memory_gb={gb})"
    return Row(original, trt_skip_gpu_memory_less_than(gb * 10**9), (port,), id=id)


def nccl_row(original: str, version: tuple[int, int], id: str) -> Row:
    """A PyTorch NCCL version gate ported as ``requires_versions``: without a GPU, current releases decide otherwise."""
    port = f'@pytest.mark.requires_versions(nccl=">={version[0]}.{version[1]}")'
    return Row(
        original, torch_requires_nccl_version(version), (port,), without_gpu, "Without a GPU, current releases", id=id
    )


def arch_row(original: str, test: Callable[[int], bool], arch: str, id: str) -> Row:
    """A TensorRT-LLM SM gate ported as an architecture (``arch=...``): it differs where a machine's
    capability is not in the architecture table."""
    return Row(original, trt_sm(test), (arch,), capability_not_in_table, "the architecture table knows", id=id)


ROWS = [
    # Lightning
    Row("`@RunIf(min_cuda_gpus=2)`", pl_min_cuda_gpus(2), ("@pytest.mark.requires_gpus(2)",), id="pl-min-gpus"),
    Row(
        "`@RunIf(bf16_cuda=True)`",
        pl_bf16_cuda,
        ("@pytest.mark.requires_gpus(bf16=True)",),
        bf16_emulated(),
        "counts emulated bf16",
        id="pl-bf16",
    ),
    Row(
        "`@RunIf(min_cuda_gpus=2, bf16_cuda=True)`",
        lambda t: pl_bf16_cuda(t) if len(t.gpus) >= 2 else False,
        ("@pytest.mark.requires_gpus(2, bf16=True)",),
        bf16_emulated(2),
        "counts emulated bf16",
        id="pl-gpus-bf16",
    ),
    # DeepSpeed
    Row(
        "`class TestX(DistributedTest): world_size = 4`",
        ds_world_size(4),
        ("@pytest.mark.requires_gpus(4)",),
        id="ds-world-size",
    ),
    Row(
        "`class TestX(DistributedTest): world_size = 4` (let the plugin spawn the ranks)",
        ds_world_size(4),
        ('@pytest.mark.ranks(4, backend="nccl")',),
        id="ds-world-size-ranks",
    ),
    Row(
        "`@pytest.mark.world_size(2)` on a method",
        ds_world_size(2),
        ("@pytest.mark.requires_gpus(2)",),
        id="ds-world-size-method",
    ),
    Row(
        "`skip_on_arch(min_arch=8)`",
        ds_skip_on_arch(8),
        ('@pytest.mark.requires_gpus(compute_capability=">=8.0")',),
        id="ds-skip-on-arch",
    ),
    Row(
        "`bf16_required_version_check()`",
        ds_bf16_required_version_check,
        ("@pytest.mark.requires_gpus(bf16=True)", '@pytest.mark.requires_versions(cuda_runtime=">=11", nccl=">=2.10")'),
        bf16_emulated(),
        "counts emulated bf16",
        id="ds-bf16",
    ),
    Row(
        "`skip_on_cuda(valid_cuda=[121])`",
        ds_skip_on_cuda([121]),
        ('@pytest.mark.requires_versions(cuda_runtime="==12.1.*")',),
        id="ds-skip-on-cuda",
    ),
    # TensorRT-LLM
    Row(
        "`@pytest.mark.skip_less_device(8)`",
        trt_skip_less_device(8),
        ("@pytest.mark.requires_gpus(8)",),
        id="trt-less-device",
    ),
    Row(
        "`@pytest.mark.skip_less_mpi_world_size(4)`",
        trt_skip_less_mpi_world_size(4),
        ("@pytest.mark.requires_gpus(4)",),
        id="trt-less-mpi-world-size",
    ),
    Row(
        "`@pytest.mark.skip_less_device_memory(80000)`",
        trt_skip_less_device_memory(80000),
        ("@pytest.mark.requires_gpus(min_memory_gb=80000 * 2**20 / 1e9)",),
        id="trt-device-memory-80000",
    ),
    Row(
        "`skip_less_device_memory(40000)`",
        trt_skip_less_device_memory(40000),
        ("@pytest.mark.requires_gpus(min_memory_gb=40000 * 2**20 / 1e9)",),
        id="trt-device-memory-40000",
    ),
    memory_row("`@skip_gpu_memory_less_than_40gb`", 40, "trt-gpu-memory-40gb"),
    memory_row("`_80gb`", 80, "trt-gpu-memory-80gb"),
    memory_row("`_138gb`", 138, "trt-gpu-memory-138gb"),
    Row(
        "`skip_num_gpus_less_than(4)`",
        trt_skip_num_gpus_less_than(4),
        ("@pytest.mark.requires_gpus(4)",),
        id="trt-num-gpus",
    ),
    Row("`@skip_single_gpu`", trt_skip_num_gpus_less_than(2), ("@pytest.mark.requires_gpus(2)",), id="trt-single-gpu"),
    capability_row("`@skip_pre_ada`", lambda s: s >= 89, ">=8.9", "trt-pre-ada"),
    capability_row("`@skip_pre_hopper`", lambda s: s >= 90, ">=9.0", "trt-pre-hopper"),
    capability_row("`@skip_pre_blackwell`", lambda s: s >= 100, ">=10.0", "trt-pre-blackwell"),
    arch_row("`@skip_pre_ada`", lambda s: s >= 89, 'arch=">=ada"', "trt-pre-ada-arch"),
    arch_row("`@skip_pre_hopper`", lambda s: s >= 90, 'arch=">=hopper"', "trt-pre-hopper-arch"),
    arch_row("`@skip_pre_blackwell`", lambda s: s >= 100, 'arch=">=blackwell"', "trt-pre-blackwell-arch"),
    Row(
        "`skip_on_arch(min_arch=8)`",
        ds_skip_on_arch(8),
        ('arch=">=ampere"',),
        capability_not_in_table,
        "every capability its table knows",
        id="ds-skip-on-arch-arch",
    ),
    arch_row("`@skip_post_blackwell`", lambda s: s < 100, 'arch="<blackwell"', "trt-post-blackwell-arch"),
    arch_row("`@skip_no_hopper`", lambda s: s == 90, 'arch="hopper"', "trt-no-hopper-arch"),
    arch_row("`@skip_non_ada_unittest`", lambda s: s == 89, 'arch="ada"', "trt-non-ada-arch"),
    arch_row(
        "`@skip_neither_ada_nor_hopper_unittest`",
        lambda s: s in (89, 90),
        'arch=["ada", "hopper"]',
        "trt-ada-or-hopper-arch",
    ),
    arch_row("`@force_ampere`", lambda s: 80 <= s <= 89, 'arch=">=ampere,<=ada"', "trt-force-ampere-arch"),
    capability_row("`@skip_post_blackwell`", lambda s: s < 100, "<10.0", "trt-post-blackwell"),
    capability_row("`@skip_post_blackwell_ultra`", lambda s: s < 103, "<10.3", "trt-post-blackwell-ultra"),
    capability_row("`@skip_blackwell`", lambda s: s not in (100, 103), "!=10.0,!=10.3", "trt-blackwell"),
    capability_row("`@skip_blackwell_geforce`", lambda s: s != 120, "!=12.0", "trt-blackwell-geforce"),
    capability_row("`@skip_no_hopper`", lambda s: s == 90, "==9.0", "trt-no-hopper"),
    capability_row("`@skip_non_hopper_unittest`", lambda s: s == 90, "==9.0", "trt-non-hopper"),
    capability_row("`@skip_non_ada_unittest`", lambda s: s == 89, "==8.9", "trt-non-ada"),
    capability_row(
        "`@skip_neither_ada_nor_hopper_unittest`", lambda s: s in (89, 90), ">=8.9,<=9.0", "trt-ada-or-hopper"
    ),
    capability_row("`@skip_no_sm120`", lambda s: s == 120, "==12.0", "trt-sm120"),
    capability_row("`@force_ampere`", lambda s: 80 <= s <= 89, ">=8.0,<=8.9", "trt-force-ampere"),
    Row(
        '`@pytest.mark.skip_device_not_contain(["H100", "H200"])`',
        trt_skip_device_not_contain(["H100", "H200"]),
        ('@pytest.mark.requires_gpus(model=["H100", "H200"])',),
        case_or_line(["H100", "H200"]),
        "ignores case",
        id="trt-device-contain-hopper",
    ),
    Row(
        '`skip_device_not_contain(["A100"])`',
        trt_skip_device_not_contain(["A100"]),
        ('@pytest.mark.requires_gpus(model=["A100"])',),
        case_or_line(["A100"]),
        "ignores case",
        id="trt-device-contain-a100",
    ),
    Row(
        "`@skip_no_nvls`",
        trt_skip_no_nvls,
        ("@pytest.mark.requires_gpus(multicast=True)", '@pytest.mark.requires_versions(cuda=">=12.1")'),
        id="trt-no-nvls",
    ),
    Row(
        "`@skip_nvlink_inactive` (integration `conftest.py`)",
        trt_skip_nvlink_inactive,
        ("@pytest.mark.requires_nvlink",),
        used_pair_without_nvlink,
        "every pair of the GPUs the test uses",
        id="trt-nvlink-inactive",
    ),
    Row(
        "`skip_nvlink_inactive` (`tests/unittest/utils/util.py`)",
        trt_ut_check_nvlink,
        ("@pytest.mark.requires_nvlink",),
        used_pair_without_nvlink,
        "returns True whenever NVML starts",
        id="trt-ut-nvlink-inactive",
    ),
    # PyTorch
    Row("`@skip_if_lt_x_gpu(4)`", torch_skip_if_lt_x_gpu(4), ("@pytest.mark.requires_gpus(4)",), id="torch-lt-x-gpu"),
    Row(
        "`class T(MultiProcessTestCase)` with `world_size` 2 and `@skip_if_lt_x_gpu(2)`",
        torch_skip_if_lt_x_gpu(2),
        ('@pytest.mark.ranks(2, backend="nccl")',),
        id="torch-multiprocess-lt-x-gpu",
    ),
    Row(
        "`class T(MultiProcessTestCase)` with `world_size` 2, a gloo test",
        lambda t: True,
        ('@pytest.mark.ranks(2, backend="gloo")',),
        id="torch-multiprocess-gloo",
    ),
    nccl_row('`@requires_nccl_version((2, 18), "needs NCCL 2.18")`', (2, 18), "torch-nccl-version"),
    nccl_row("`@requires_nccl_shrink()`", (2, 27), "torch-nccl-shrink"),
    Row(
        "`@requires_multicast_support()`",
        torch_requires_multicast_support,
        ("@pytest.mark.requires_gpus(multicast=True)",),
        id="torch-multicast",
    ),
    Row(
        "`if not sm_is_or_higher_than(device, 9, 0): self.skipTest(...)`",
        torch_sm_is_or_higher_than(9, 0),
        ('@pytest.mark.requires_gpus(compute_capability=">=9.0")',),
        id="torch-sm-9.0",
    ),
    Row(
        "`sm_is_or_higher_than(device, 8, 0)`",
        torch_sm_is_or_higher_than(8, 0),
        ('@pytest.mark.requires_gpus(compute_capability=">=8.0")',),
        id="torch-sm-8.0",
    ),
    Row(
        "`@requires_cuda_p2p_access()`",
        torch_requires_cuda_p2p_access,
        ("@pytest.mark.requires_p2p",),
        cuda_peer_unrecorded,
        "NVML's P2P status",
        id="torch-cuda-p2p-access",
    ),
]


@dataclass(frozen=True)
class PredicateRow:
    """A row whose port is no marker but a predicate given to ``gputopo_ranks.require``."""

    original: str  # as docs/porting.md writes it
    rule: Callable[[Topology], bool | None]
    predicate: str  # the lambda as docs/porting.md writes it in ``gputopo_ranks.require(<lambda>, ...)``
    id: str

    def __str__(self) -> str:
        return self.id


PREDICATE_ROWS = [
    PredicateRow(
        "`@skip_device_contain_gb200`",
        trt_skip_device_contain(["GB200"]),
        'lambda t: t.gpus and t.gpus[0].name is not None and "GB200" not in t.gpus[0].name',
        id="trt-device-contain-gb200",
    ),
    PredicateRow(
        "`skip_on_cuda(valid_cuda=[118, 121])`",
        ds_skip_on_cuda([118, 121]),
        'lambda t: t.cuda_runtime_version in ("11.8", "12.1")',
        id="ds-skip-on-cuda-several",
    ),
]

TOPOLOGIES = {name: probe(name) for name in MACHINES}


def marker_call(text: str) -> tuple[str, tuple, dict]:
    """``@pytest.mark.name(args)`` as the plugin reads it: its name and arguments (a bare ``arch=...``,
    as the doc writes an alternative, is ``requires_gpus(arch=...)``)."""
    if text.startswith("arch="):
        text = f"@pytest.mark.requires_gpus({text})"
    body = text.removeprefix("@pytest.mark.")
    name, _, rest = body.partition("(")
    args, kwargs = eval(f"(lambda *a, **k: (a, k))({rest[:-1] if rest else ''})")  # the row's own text
    return name, args, kwargs


def ours(row: Row, t: Topology) -> bool:
    """Whether every marker of the port is met on ``t``, judged as the plugin judges it."""
    return all(from_marker(*marker_call(m))[0].evaluate(t).ok for m in row.port)


@pytest.mark.parametrize("row", ROWS, ids=str)
def test_each_port_decides_as_its_original_on_every_bundled_machine(row):
    """A ported test runs where the original helper runs it and skips where it skips, on every
    bundled machine; where the machine's record lacks the fact the original reads, the port is
    never met (unknown is never met) unless the doc names the difference; where they decide
    otherwise, the difference is the one the doc states for the row."""
    wrong = []
    for name, t in TOPOLOGIES.items():
        theirs, mine = row.rule(t), ours(row, t)
        allowed = row.differs is not None and row.differs(t)
        if theirs is None:
            if mine and not allowed:
                wrong.append(f"{name}: the port runs where the original cannot decide")
        elif mine != theirs and not allowed:
            wrong.append(
                f"{name}: the original {'runs' if theirs else 'skips'}, the port {'runs' if mine else 'skips'}"
            )
    assert not wrong, f"{row}: " + "; ".join(wrong)


@pytest.mark.parametrize("row", PREDICATE_ROWS, ids=str)
def test_each_predicate_port_decides_as_its_original_on_every_bundled_machine(row):
    """Where the doc gives a ``gputopo_ranks.require`` predicate for a helper no marker says, that
    predicate, as the page writes it, runs the test where the original does and skips where it
    skips on every bundled machine; where the original cannot decide, it skips (unknown is never met)."""
    text = DOC.read_text()
    assert row.original in text and f"gputopo_ranks.require({row.predicate}," in text, (
        f"{row}: docs/porting.md does not give this predicate for {row.original}"
    )
    predicate = eval(row.predicate)  # the doc's own text
    wrong = []
    for name, t in TOPOLOGIES.items():
        theirs, mine = row.rule(t), bool(predicate(t))
        if mine and theirs is None:
            wrong.append(f"{name}: the predicate holds where the original cannot decide")
        elif theirs is not None and mine != theirs:
            wrong.append(
                f"{name}: the original {'runs' if theirs else 'skips'}, the predicate {'holds' if mine else 'does not'}"
            )
    assert not wrong, f"{row}: " + "; ".join(wrong)


@pytest.mark.parametrize("row", ROWS, ids=str)
def test_each_port_is_the_doc_row(row):
    """What this file judges is what docs/porting.md tells a user to write: the original, each of
    its markers, and the words of any difference are on the page."""
    text = DOC.read_text()
    for piece in (row.original, *row.port, *([row.why] if row.why else [])):
        assert piece in text, f"{row}: docs/porting.md does not say {piece!r}"


def test_a_documented_difference_shows_on_a_bundled_machine():
    """The differences the doc states are real: each shows on some bundled machine (the test above
    would otherwise allow a difference nobody sees)."""
    seen = {
        str(row): any(row.rule(t) is not None and ours(row, t) != row.rule(t) for t in TOPOLOGIES.values())
        for row in ROWS
        if row.differs is not None
    }
    assert seen.pop("trt-nvlink-inactive") and seen.pop("trt-ut-nvlink-inactive")  # 4x-rtx4090, dgx1-v100, ...
    assert seen.pop("pl-bf16") and seen.pop("pl-gpus-bf16")  # dgx1-v100: V100 has emulated bf16 only
    assert seen.pop("torch-nccl-version") and seen.pop("torch-nccl-shrink")  # no-gpu: the original runs


def test_the_nccl_rows_are_decided_on_recorded_machines():
    """The NCCL version rows are tried where the original decides by the version, not only where it
    is unknown: at least two bundled machines record torch's CUDA and the NCCL it loads, and the
    rows run on one and skip on another there."""
    recorded = {name for name, t in TOPOLOGIES.items() if t.gpus and t.nccl_version and t.cuda_runtime_version}
    assert len(recorded) >= 2, recorded
    shrink = next(r for r in ROWS if r.id == "torch-nccl-shrink")
    assert {ours(shrink, TOPOLOGIES[name]) for name in recorded} == {True, False}


def test_the_old_ports_were_not_equivalent():
    """The equivalents the doc used to give decide otherwise than the original on a bundled machine
    (or would, on one a user has), which is why the rows changed: an 8-GPU count the original
    never asks for, and 80 GB for 80000 MiB (83.9 GB)."""
    nvls = Row("", trt_skip_no_nvls, ("@pytest.mark.requires_gpus(8, multicast=True)",))
    four = dataclass_replace_gpus(TOPOLOGIES["hgx-h100"], 4, cuda="12.8")
    assert trt_skip_no_nvls(four) is True and not ours(nvls, four)
    mem = Row("", trt_skip_less_device_memory(80000), ("@pytest.mark.requires_gpus(min_memory_gb=80)",))
    card = dataclass_replace_memory(TOPOLOGIES["single-gpu"], 81 * 10**9)  # 81 GB: 77248 MiB
    assert trt_skip_less_device_memory(80000)(card) is False and ours(mem, card)


def dataclass_replace_gpus(t: Topology, n: int, cuda: str) -> Topology:
    import dataclasses

    return dataclasses.replace(t.restrict(range(n)), cuda_driver_version=cuda)


def dataclass_replace_memory(t: Topology, nbytes: int) -> Topology:
    import dataclasses

    return dataclasses.replace(t, gpus=(dataclasses.replace(t.gpus[0], memory_total_bytes=nbytes),))


@pytest.mark.parametrize("machine", MACHINES)
def test_the_plugin_decides_each_port_as_judged_here(pytester, machine):
    """The rows' markers in a test file, and the doc's predicates in ``gputopo_ranks.require``, run by
    pytest on each bundled machine: each test passes exactly where the port is judged met above (the
    plugin's stacked-marker reading and verdicts change nothing for a test marked once)."""
    lines = ["import pytest", ""]
    for i, row in enumerate(ROWS):
        if spawns(row):
            continue
        lines += [m if m.startswith("@") else f"@pytest.mark.requires_gpus({m})" for m in row.port] + [
            f"def test_{i}():",
            "    pass",
            "",
        ]
    for i, row in enumerate(PREDICATE_ROWS):
        lines += [
            f"def test_predicate_{i}(gputopo_ranks):",
            f"    gputopo_ranks.require({row.predicate}, 'the port')",
            "",
        ]
    pytester.makepyfile(test_rows="\n".join(lines))
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA", "--gputopo-machine", machine)
    passed = {
        line.split("test_rows.py::")[1].split()[0]
        for line in result.outlines
        if line.startswith("PASSED test_rows.py::test_")
    }
    t = TOPOLOGIES[machine]
    expected = {f"test_{i}" for i, row in enumerate(ROWS) if ours(row, t) and not spawns(row)}
    expected |= {f"test_predicate_{i}" for i, row in enumerate(PREDICATE_ROWS) if eval(row.predicate)(t)}
    assert passed == expected, result.stdout.str()


def spawns(row: Row) -> bool:
    return any(m.startswith("@pytest.mark.ranks(") for m in row.port)


@pytest.mark.parametrize("machine", MACHINES)
def test_the_plugin_gates_each_ranks_port_as_judged_here(pytester, machine):
    """The rows ported onto ``ranks``, run by pytest on each bundled machine up to their setup
    (``--setup-only``: their ranks are not spawned here, NCCL is not on this host): each is skipped
    exactly where the port is judged unmet above."""
    lines = ["import pytest", ""]
    for i, row in enumerate(ROWS):
        if spawns(row):
            lines += [*row.port, f"def test_{i}():", "    pass", ""]
    pytester.makepyfile(test_rows="\n".join(lines))
    result = pytester.runpytest("-p", "no:cacheprovider", "-v", "--setup-only", "--gputopo-machine", machine)
    skipped = {
        line.split("::")[1].split()[0]
        for line in result.outlines
        if line.startswith("test_rows.py::test_") and " SKIPPED" in line
    }
    t = TOPOLOGIES[machine]
    assert skipped == {f"test_{i}" for i, row in enumerate(ROWS) if spawns(row) and not ours(row, t)}, (
        result.stdout.str()
    )


def test_the_originals_count_gpus_a_process_cannot_see():
    """TensorRT-LLM counts ``nvidia-smi -L`` lines, every GPU of the host; the marker counts the GPUs
    the process sees: with two of eight GPUs visible, skip_less_device(8) runs and the port skips,
    the difference the doc states above its tables."""
    host = TOPOLOGIES["hgx-h100"]
    seen = host.restrict([0, 1])  # CUDA_VISIBLE_DEVICES=0,1
    row = next(r for r in ROWS if r.id == "trt-less-device")
    assert row.rule(host) is True and not ours(row, seen)
    assert "whatever `CUDA_VISIBLE_DEVICES`" in DOC.read_text()


@pytest.mark.parametrize("machine", MACHINES)
def test_a_class_memory_gate_and_a_method_count_keep_both_conditions(pytester, machine):
    """TensorRT-LLM's class ``skip_less_device_memory(80000)`` and method ``skip_less_device(4)`` are
    two markers, both applied; ported to a class ``requires_gpus(min_memory_gb=...)`` and a method
    ``requires_gpus(4)``, the method needs four GPUs of that memory: it runs exactly where both
    originals run (the bundled machines' GPUs are alike, so GPU0's memory is each GPU's)."""
    pytester.makepyfile(
        test_stacked="""
import pytest

@pytest.mark.requires_gpus(min_memory_gb=80000 * 2**20 / 1e9)
class TestLarge:
    @pytest.mark.requires_gpus(4)
    def test_tp4(self):
        pass
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", machine)
    t = TOPOLOGIES[machine]
    runs = trt_skip_less_device(4)(t) and trt_skip_less_device_memory(80000)(t)
    assert result.parseoutcomes().get("passed", 0) == (1 if runs else 0), result.stdout.str()
