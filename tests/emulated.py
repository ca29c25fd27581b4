"""An emulated GPU host, entered as a user's run enters it: a child process whose library path holds
a real shared object named ``libnvidia-ml.so.1`` and an emulated ``libcuda.so.1`` (``emulated_host/
libcuda.c``: the driver API functions the probe calls, with cuda.h's signatures), and whose Python
path holds an emulated ``pynvml`` (the project's fake NVML serving a recorded machine) and ``torch``
(a release's personality; importing it takes as long as the test says). Nothing of the plugin is
patched: the run finds these as it would find the real ones.

Every emulated library appends "<pid> <call>" to ``calls.log``, so a test can say which process
imported torch, started NVML or started CUDA.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pynvml as real_pynvml
import pytest

SOURCES = Path(__file__).with_name("emulated_host")
GCC = shutil.which("gcc") or shutil.which("cc")
needs_compiler = pytest.mark.skipif(GCC is None, reason="no C compiler here to build the emulated libcuda.so.1")


@dataclass
class Host:
    root: Path
    machine: str
    vm: bool = False  # the GPUs passed through to a virtual machine (nvml_drivers.VM_P2P_READ)

    @property
    def calls_log(self) -> Path:
        return self.root / "calls.log"

    def calls(self) -> list[tuple[int, str]]:
        """(pid, call) of every emulated library call so far."""
        if not self.calls_log.exists():
            return []
        lines = self.calls_log.read_text().splitlines()
        return [(int(pid), call) for pid, call in (line.split(" ", 1) for line in lines)]

    def forget_calls(self) -> None:
        self.calls_log.unlink(missing_ok=True)

    def cuda(self, *, init_result: int = 0, init_ms: int = 0, nopeer=(), multicast=None, unlisted=()) -> None:
        """What libcuda answers: cuInit's CUresult and delay, pairs refused peer access, multicast, and
        the GPUs it does not enumerate (``unlisted``: the recording's indices, NVML's; the others are
        numbered as if those were not there, as CUDA numbers what it finds). In a VM, pairs without an
        NVLink are refused too (as NVML's P2P status says there)."""
        from pytest_gputopo.probe.recorded import load_profile

        topology = load_profile(self.machine).topology
        gpus = sorted((g for g in topology.gpus if g.index not in unlisted), key=lambda g: g.pci_bus_id)  # CUDA's order
        if self.vm:
            ordinal = {g.index: i for i, g in enumerate(gpus)}
            nopeer = [*nopeer, *((ordinal[ln.a], ordinal[ln.b]) for ln in topology.links if ln.nvlinks == 0)]
        lines = [f"init {init_result} {init_ms}"]
        for i, g in enumerate(gpus):
            mc = g.multicast if multicast is None else multicast
            lines.append(f"dev {g.pci_bus_id[4:]} {-1 if mc is None else int(mc)}")  # CUDA writes a 4-digit domain
            lines += [f"uuid {i} {g.uuid}"] if g.uuid else []
        lines += [f"nopeer {a} {b}\nnopeer {b} {a}" for a, b in nopeer]
        (self.root / "cuda.txt").write_text("\n".join(lines) + "\n")


def build_libs(folder: Path, multicast_create: bool = True) -> Path:
    lib = folder / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    flags = [] if multicast_create else ["-DNO_MULTICAST_CREATE"]
    subprocess.run(
        [GCC, "-shared", "-fPIC", "-O1", *flags, "-o", str(lib / "libcuda.so.1"), str(SOURCES / "libcuda.c")],
        check=True,
    )
    empty = folder / "empty.c"
    empty.write_text("int gputopo_emulated_nvml;\n")
    subprocess.run([GCC, "-shared", "-fPIC", "-o", str(lib / "libnvidia-ml.so.1"), str(empty)], check=True)
    return lib


@pytest.fixture(scope="session")
def emulated_libs(tmp_path_factory) -> Path:
    if GCC is None:
        pytest.skip("no C compiler here to build the emulated libcuda.so.1")
    return build_libs(tmp_path_factory.mktemp("emulated-libs"))


def _drivers():
    """``emulated_host/nvml_drivers.py``: the driver branches the emulated host plays."""
    spec = importlib.util.spec_from_file_location("nvml_drivers", SOURCES / "nvml_drivers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nvml_drivers = _drivers()

# make_host(torch=INSTALLED_TORCH): no emulated torch on the path; the environment's own torch is
# imported (``ranks(n)`` tests spawn real ranks with it, their collectives on the CPUs).
# The source of ``cuda_sees()``, for a test module run on the emulated host: what its libcuda shows the
# process, each device's UUID as hex in CUDA's order (cuInit, cuDeviceGetCount, cuDeviceGetUuid).
CUDA_SEES = """
def cuda_sees():
    import ctypes

    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    n = ctypes.c_int()
    assert cu.cuDeviceGetCount(ctypes.byref(n)) == 0
    seen = []
    for d in range(n.value):
        raw = ctypes.create_string_buffer(16)
        assert cu.cuDeviceGetUuid(raw, d) == 0
        seen.append(raw.raw.hex())
    return seen
"""

INSTALLED_TORCH = "installed"


def make_host(
    root: Path,
    libs: Path,
    machine: str,
    *,
    torch: str | None = "2.13.0",
    torch_import_s: float = 0.0,
    nvml_missing=(),
    driver: str | None = None,
    vm: bool = False,
    health: dict | None = None,
) -> tuple[Host, dict]:
    """An emulated host under ``root`` serving a bundled machine, and the environment variables that
    enter it (to be laid over the caller's). ``torch``: the emulated release's personality, None (torch
    not installed) or ``INSTALLED_TORCH`` (the environment's own). ``driver``: a branch of
    ``nvml_drivers.BRANCHES`` (NVML reports its versions and lacks what its header lacks; None: the
    recording's versions, every function); ``vm``: the GPUs are passed through to a virtual machine;
    ``health``: {NVML index: {GpuHealth field: value}}, those GPUs' health facts (the others healthy)."""
    if driver is not None:
        from pytest_gputopo.probe.recorded import load_profile

        if driver not in nvml_drivers.BRANCHES:
            raise ValueError(f"driver {driver!r}: no such branch here ({', '.join(nvml_drivers.BRANCHES)})")
        too_new = {
            g.compute_capability
            for g in load_profile(machine).topology.gpus
            if not nvml_drivers.drives(driver, g.compute_capability)
        }
        if too_new:
            raise ValueError(f"driver {driver} predates {machine}'s GPUs (compute capability {', '.join(too_new)})")
    py = root / "python"
    py.mkdir(parents=True)
    shutil.copy(SOURCES / "pynvml.py", py / "pynvml.py")
    shutil.copy(SOURCES / "nvml_drivers.py", py / "nvml_drivers.py")
    shutil.copy(SOURCES.parent / "fake_nvml.py", py / "fake_nvml.py")
    if torch == INSTALLED_TORCH:  # the environment's own torch (a CPU build here): ranks spawned for real
        pass
    elif torch is not None:
        shutil.copytree(SOURCES / "torch", py / "torch")
        dist = py / f"torch-{torch}.dist-info"  # what importlib.metadata.version("torch") reads
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n")
    else:  # torch not installed: a path entry that hides the environment's own
        (py / "sitecustomize.py").write_text(
            "import sys\nclass _NoTorch:\n    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ModuleNotFoundError(\"No module named 'torch'\", name=name)\n"
            "sys.meta_path.insert(0, _NoTorch())\n"
        )
    host = Host(root, machine, vm=vm)
    host.cuda()
    (root / "gpu-memory").mkdir()
    shutil.copy(SOURCES / "emulated_gpu.py", py / "emulated_gpu.py")
    env = {
        "LD_LIBRARY_PATH": os.pathsep.join([str(libs), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]),
        "PYTHONPATH": os.pathsep.join([str(py), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "GPUTOPO_EMU_REAL_PYNVML": real_pynvml.__file__,
        "GPUTOPO_EMU_MACHINE": machine,
        "GPUTOPO_EMU_CUDA": str(root / "cuda.txt"),
        "GPUTOPO_EMU_CALLS": str(host.calls_log),
        "GPUTOPO_EMU_TORCH": "" if torch in (None, INSTALLED_TORCH) else torch,
        "GPUTOPO_EMU_TORCH_IMPORT_S": str(torch_import_s),
        "GPUTOPO_EMU_NVML_MISSING": ",".join(nvml_missing),
        "GPUTOPO_EMU_DRIVER": driver or "",
        "GPUTOPO_EMU_VM": "1" if vm else "",
        "GPUTOPO_EMU_HEALTH": json.dumps(health or {}),
        "GPUTOPO_EMU_GPU_MEMORY": str(root / "gpu-memory"),
    }
    return host, env


@pytest.fixture
def emulated_host(emulated_libs, tmp_path, monkeypatch):
    """``enter(machine, torch=release, torch_import_s=..., nvml_missing=..., driver=branch, vm=...)``
    sets this test's environment to an emulated host serving a bundled machine; pytester's subprocess
    runs enter it."""

    def enter(machine: str, **personality) -> Host:
        host, env = make_host(tmp_path / "host", emulated_libs, machine, **personality)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "RANK", "WORLD_SIZE", "SLURM_PROCID"):
            monkeypatch.delenv(name, raising=False)
        return host

    return enter
