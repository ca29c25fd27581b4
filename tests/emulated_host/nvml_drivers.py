"""NVIDIA driver branches as the emulated host plays them: what each branch's libnvidia-ml lacks of
the functions the probe calls, the driver and CUDA versions it reports, and the GPUs it drives.
Pure data (standard library only): the emulated ``pynvml`` reads it in the child, the tests read it
to say what they expect.

Sources (every entry below names its own):

- NVMLH: NVIDIA's ``nvml.h`` as NVIDIA vendors it in https://github.com/NVIDIA/go-nvml, file
  ``gen/nvml/nvml.h``, at the commits named (their messages name the NVML / CUDA version of the
  header). A function is taken to be in a branch's libnvidia-ml from the first header that declares
  it (``nvmlReturn_t DECLDIR <name>(``); go-nvml's oldest header (56658d6, NVML API 11, already with
  the MIG API of CUDA 11.0) declares every function the probe calls except one.
- CUDA-RN: the CUDA Toolkit release notes, table "CUDA Toolkit and Corresponding Driver Versions"
  (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/): CUDA 11.2.1/11.2.2 >= 460.32.03,
  11.4 Update 1/2 >= 470.57.02, 12.2 GA >= 535.54.03, 12.4 GA >= 550.54.14, 12.8 GA >= 570.26,
  13.0 GA >= 580.65.06 -- the header of CUDA 11.x/12.x/13.x is the one of that driver branch.
- Banners: public ``nvidia-smi`` outputs ("NVIDIA-SMI <v>  Driver Version: <v>  CUDA Version: <c>"),
  which give nvmlSystemGetDriverVersion and nvmlSystemGetCudaDriverVersion of a real driver.
- The probe calls these C symbols through nvidia-ml-py 13.615.71 (``pynvml.py``):
  nvmlInitWithFlags, nvmlShutdown, nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion,
  nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName, nvmlDeviceGetUUID,
  nvmlDeviceGetPciInfo_v3, nvmlDeviceGetMemoryInfo (v1: no version given),
  nvmlDeviceGetCudaComputeCapability, nvmlDeviceGetCpuAffinity, nvmlDeviceGetMemoryAffinity,
  nvmlDeviceGetMigMode, nvmlDeviceGetComputeMode, nvmlDeviceGet{Curr,Max}PcieLink{Generation,Width},
  nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkRemoteDeviceType, nvmlDeviceGetNvLinkRemotePciInfo_v2,
  nvmlDeviceGetNvLinkVersion, nvmlDeviceGetTopologyCommonAncestor, nvmlDeviceGetP2PStatus.
"""

from __future__ import annotations

from typing import NamedTuple

# The branch whose header first declares each function the probe calls (pynvml name -> branch, source).
# "455": already in go-nvml's oldest header (56658d6: NVML API 11 with the MIG API, so CUDA 11.0 or later,
# and older than 7dce688 "Update nvml.h from nvidia/cuda:11.1-devel"): R450 or R455.
_OLDEST = "455"
_IN_OLDEST = "NVMLH 56658d6 (oldest vendored header: CUDA 11.0 or 11.1, R450/R455)"
FIRST_IN: dict[str, tuple[str, str]] = {
    name: (_OLDEST, _IN_OLDEST)
    for name in (
        "nvmlInit",
        "nvmlShutdown",
        "nvmlSystemGetDriverVersion",
        "nvmlSystemGetCudaDriverVersion",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetCpuAffinity",
        "nvmlDeviceGetMemoryAffinity",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkWidth",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetNvLinkRemotePciInfo",
        "nvmlDeviceGetNvLinkVersion",
        "nvmlDeviceGetTopologyCommonAncestor",
        "nvmlDeviceGetP2PStatus",
    )
}
FIRST_IN["nvmlDeviceGetNvLinkRemoteDeviceType"] = (
    "470",
    "NVMLH: absent at c8ecfcd 'Update nvml to 11.2.2' and a2a452c 'Update nvml.h to v11.3', "
    "first declared at 15056a1 'Update nvml.h to v11.4' (CUDA 11.4 = R470, CUDA-RN)",
)


class Branch(NamedTuple):
    driver: str  # what nvmlSystemGetDriverVersion returns
    cuda: str  # nvmlSystemGetCudaDriverVersion as "major.minor"
    source: str


# The first CUDA toolkit (so driver branch, CUDA-RN) that knows an architecture: the emulated host
# plays no older branch with such GPUs (no source shows one driving them).
# Ada (8.9) and Hopper (9.x): CUDA 11.8 = R520 (GROMACS MR 3180: "Ada (89) and Hopper (90) support now
# exists in CUDA 11.8"). Blackwell (10.x and up): CUDA 12.8 = R570 (PyTorch PR 141724 adds 10.0 for
# CUDA > 12.6; NVIDIA's Blackwell compatibility guide builds for it with CUDA 12.8).
def first_branch(compute_capability: str) -> str | None:
    major, minor = (int(p) for p in compute_capability.split("."))
    if major >= 10:
        return "570"
    if major == 9 or (major, minor) == (8, 9):
        return "520"
    return None


BRANCHES: dict[str, Branch] = {
    # The branch before the first with every function the probe calls: its header lacks
    # nvmlDeviceGetNvLinkRemoteDeviceType (FIRST_IN).
    "460": Branch(
        "460.32.03",
        "11.2",
        "CUDA-RN (11.2.1/11.2.2 >= 460.32.03); banners 'Driver Version: 460.32.03 CUDA Version: 11.2'",
    ),
    "470": Branch(
        "470.57.02",
        "11.4",
        "CUDA-RN (11.4 Update 1/2 >= 470.57.02); banners 'Driver Version: 470.57.02 CUDA Version: 11.4' "
        "(e.g. an 8x V100 DGX-1 HugeCTR report with its topo -m); bundled 2x-rtx3090-nvlink",
    ),
    "535": Branch(
        "535.161.08",
        "12.2",
        "banners 'Driver Version: 535.161.08 CUDA Version: 12.2'; bundled 4x-a100-40gb; "
        "DGX A100 on 535.154.05 in NVIDIA/DCGM#149",
    ),
    "550": Branch(
        "550.54.14", "12.4", "CUDA-RN (12.4 GA >= 550.54.14); banners 'Driver Version: 550.54.14 CUDA Version: 12.4'"
    ),
    "570": Branch(
        "570.124.06",
        "12.8",
        "banners 'Driver Version: 570.124.06 CUDA Version: 12.8'; bundled hgx-h100's source "
        "(8x H100 HBM3); NVIDIA/dcgm-exporter#576 (H100, DCGM_FI_DRIVER_VERSION=570.124.06)",
    ),
    "580": Branch(
        "580.126.09",
        "13.0",
        "bundled gb200-tray's source (GB200 NVL72 tray, `nvidia-smi`: driver 580.126.09, CUDA 13.0)",
    ),
}


def _key(branch: str) -> int:
    return int(branch)


def lacks(branch: str) -> tuple[str, ...]:
    """The probe's functions this branch's libnvidia-ml has no symbol for."""
    return tuple(sorted(name for name, (first, _) in FIRST_IN.items() if _key(first) > _key(branch)))


def drives(branch: str, compute_capability: str | None) -> bool:
    """Whether ``branch`` drives a GPU of this compute capability ("9.0"); unknown: assumed so."""
    first = first_branch(compute_capability) if compute_capability else None
    return first is None or _key(branch) >= _key(first)


# A virtual machine with the GPUs passed through (GPUTOPO_EMU_VM=1): without the hypervisor's
# "GPUDirect clique" PCI capability the guest's driver refuses PCIe P2P, and `nvidia-smi topo -p2p r`
# shows CNS (chipset not supported) between such GPUs: noonghunna/club-3090 PR 884 (QEMU q35 guest,
# "topo -p2p r still reports CNS ... a chipset-table verdict against the emulated Q35/ICH9"),
# lxc/incus#3962 ("nvidia-smi topo -p2p r thinks there is no support for P2P DMA between the cards. On
# bare metal, this works"), cloud-hypervisor PR 6235 ("The NVIDIA driver does not utilize PCIe P2P
# unless it detects hardware support ... Within a virtual machine, information about the host PCIe
# bridge is lost"). NVLink survives passthrough of a whole HGX board: 8x H100 in a RHEL AI VM show NV18
# between every pair (the corpus's topo/024, bundled hgx-h100's source), and NCCL's dump of an H200 VM
# lists each GPU's NVLinks to the NVSwitches (NVIDIA/nccl-tests#256). So the VM personality turns
# NVML's P2P read status of every pair without an NVLink into CNS and refuses CUDA peer access there,
# and leaves NVLink pairs alone. Only the read index is sourced ("-p2p r"); write is left as recorded.
VM_P2P_READ = 1  # NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
