"""An emulated host's ``pynvml``: the project's fake NVML (``tests/fake_nvml.py``, built on the real
nvidia-ml-py module and its quirks) serving the recorded machine $GPUTOPO_EMU_MACHINE.

$GPUTOPO_EMU_DRIVER: a driver branch of ``nvml_drivers.BRANCHES`` ("470", "535", ...): the driver and
CUDA versions NVML reports are that branch's, and the functions its header lacks are missing.
$GPUTOPO_EMU_VM=1: the GPUs are passed through to a virtual machine (``nvml_drivers.VM_P2P_READ``).
$GPUTOPO_EMU_NVML_MISSING: NVML functions this driver lacks (comma-separated), beyond the branch's;
each raises ``NVMLError_FunctionNotFound``, as nvidia-ml-py's ``_nvmlGetFunctionPointer`` does when
the driver's libnvidia-ml has no such symbol. $GPUTOPO_EMU_CALLS: each ``nvmlInit`` appends "<pid> nvmlInit".
$GPUTOPO_EMU_GPU_MEMORY: a folder where an emulated process says what it uses of a GPU (``emulated_gpu.use``):
NVML lists each live one as a compute process using that many bytes.
$GPUTOPO_EMU_NVML_HANG: a file to write the pid to, then never answer (a hung driver).
$GPUTOPO_EMU_HEALTH: JSON {"<nvml index>": {GpuHealth field: value}}: that GPU's health facts instead of
a healthy one's. A GPU whose recording has no health reports what a healthy GPU of its kind does
(``_healthy``).
"""

import importlib.util
import json
import os
import sys
import time

_spec = importlib.util.spec_from_file_location("pynvml", os.environ["GPUTOPO_EMU_REAL_PYNVML"])
_real = importlib.util.module_from_spec(_spec)
sys.modules["pynvml"] = _real
_spec.loader.exec_module(_real)
if os.environ.get("GPUTOPO_EMU_NVML_HANG"):
    with open(os.environ["GPUTOPO_EMU_NVML_HANG"], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)

import dataclasses  # noqa: E402

import nvml_drivers  # noqa: E402  (next to this file)

from fake_nvml import make_fake_pynvml  # noqa: E402  (next to this file too)
from pytest_gputopo.core import model  # noqa: E402
from pytest_gputopo.probe.recorded import load_profile  # noqa: E402

_topology = load_profile(os.environ["GPUTOPO_EMU_MACHINE"]).topology
_missing_names = list(filter(None, os.environ.get("GPUTOPO_EMU_NVML_MISSING", "").split(",")))
_branch = os.environ.get("GPUTOPO_EMU_DRIVER")
if _branch:
    _played = nvml_drivers.BRANCHES[_branch]
    _topology = dataclasses.replace(_topology, driver_version=_played.driver, cuda_driver_version=_played.cuda)
    _missing_names += nvml_drivers.lacks(_branch)
if os.environ.get("GPUTOPO_EMU_VM") == "1":
    _cns = model.P2PStatus.from_nvml(nvml_drivers.VM_P2P_READ)
    _topology = dataclasses.replace(
        _topology,
        links=tuple(
            ln if ln.nvlinks != 0 else dataclasses.replace(ln, p2p=dataclasses.replace(ln.p2p, read=_cns))
            for ln in _topology.links
        ),
    )


def _healthy(gpu):
    """What NVML reports of a healthy GPU at rest: idle clocks, persistence mode on (a server's
    nvidia-persistenced), one VBIOS per model; ECC, row remapping and an InfoROM on a data-center GPU
    (a GeForce card has ECC off and no row remapper: NotSupported); page retirement before Ampere."""
    data_center = "GeForce" not in (gpu.name or "") and "RTX 40" not in (gpu.name or "")
    major = (gpu.compute_capability or "0").split(".")[0]
    ampere_on = major.isdigit() and int(major) >= 8
    return model.GpuHealth(
        ecc_uncorrected_volatile=0 if data_center else None,
        ecc_uncorrected_aggregate=0 if data_center else None,
        remapped_rows_pending=False if data_center and ampere_on else None,
        remapping_failed=False if data_center and ampere_on else None,
        retired_pages_pending=False if data_center and not ampere_on else None,
        clocks_event_reasons=0x1,  # nvmlClocksEventReasonGpuIdle
        persistence_mode=True,
        vbios_version=f"96.00.{len(gpu.name or '') % 90:02d}.00.01",
        inforom_version="G520.0200.00.05" if data_center else None,
    )


_sick = {int(k): v for k, v in json.loads(os.environ.get("GPUTOPO_EMU_HEALTH") or "{}").items()}
_topology = dataclasses.replace(
    _topology,
    gpus=tuple(
        dataclasses.replace(
            g,
            health=dataclasses.replace(
                g.health or _healthy(g), **_sick.get(g.nvml_index if g.nvml_index is not None else g.index, {})
            ),
        )
        for g in _topology.gpus
    ),
)
_fake = make_fake_pynvml(_topology)
_init = _fake.nvmlInit


def _logged_init(*args, **kwargs):
    if os.environ.get("GPUTOPO_EMU_CALLS"):
        with open(os.environ["GPUTOPO_EMU_CALLS"], "a") as f:
            f.write(f"{os.getpid()} nvmlInit\n")
    return _init(*args, **kwargs)


_fake.nvmlInit = _logged_init


def _missing(name):
    def call(*args, **kwargs):
        raise _real.NVMLError(_real.NVML_ERROR_FUNCTION_NOT_FOUND)

    call.__name__ = name
    return call


def _running(handle):
    """The compute processes on ``handle``'s GPU: each live process that said it uses it."""
    uuid = _fake.nvmlDeviceGetUUID(handle)
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    found = []
    folder = os.environ.get("GPUTOPO_EMU_GPU_MEMORY", "")
    for name in sorted(os.listdir(folder)) if folder else ():
        pid, _, of = name.partition(".")
        if of == uuid and os.path.exists(f"/proc/{pid}"):
            with open(os.path.join(folder, name)) as f:
                used = int(f.read() or 0)
            found.append(_real.nvmlFriendlyObject({"pid": int(pid), "usedGpuMemory": used}))
    return found


_fake.nvmlDeviceGetComputeRunningProcesses = _running

for _name in _missing_names:
    setattr(_fake, _name, _missing(_name))
sys.modules["pynvml"] = _fake
