#!/usr/bin/env python3
"""Build the bundled recorded machines: ``pytest_gputopo/machines/<name>.json``.

Each machine is written below as a compact description: the GPU model, the PCI bus ids, the NUMA
layout, the NVLink wiring, and the PCIe class and P2P status of the GPU pairs. The helpers turn that
into the model's dataclasses, and ``recorded.profile_dict`` turns those into the profile format.
The degraded twins are derived in code from their healthy machine (copy it, then break one thing).

The facts come from public outputs. Each profile lists them in ``sources``. Every field that is
inferred rather than read is listed in ``inferred``, as ``field path: why``. A citation names the
publication: a URL, a GitHub issue as ``owner/repo#N``, a file by repository and path, a document by
the title docs/sources.md lists it under, or, where its address was not recorded, the publication as
its author described it. "find_string id NNN" is the id of a public file in the code-search index
these machines were built with, for files whose repository was not recorded. Comments below that say
"test corpus topo/NNN" name the copy of an output in ``../shared/corpus`` that the tests compare a
machine with; the profiles never cite the corpus.

Run it from anywhere; the output is deterministic (the same bytes on every run)::

    python scripts/build_machines.py           # (re)write the JSON files
    python scripts/build_machines.py --check   # exit 1 when a file is missing, stale or unexpected
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pytest_gputopo.core.model import P2P, Gpu, Link, LinkClass, NvLink, P2PStatus, Topology  # noqa: E402
from pytest_gputopo.probe import recorded  # noqa: E402

OUT_DIR = recorded.BUNDLED_DIR
MiB = 1 << 20

OK, GNS, CNS, NS = (P2PStatus.OK, P2PStatus.GPU_NOT_SUPPORTED, P2PStatus.CHIPSET_NOT_SUPPORTED,
                    P2PStatus.NOT_SUPPORTED)
PIX, PXB, PHB, NODE, SYS = LinkClass.PIX, LinkClass.PXB, LinkClass.PHB, LinkClass.NODE, LinkClass.SYS

# ---------------------------------------------------------------------------------------------
# Building blocks


@dataclass(frozen=True)
class Board:
    """One GPU model as NVML reports it: name, FB memory total (MiB, as nvidia-smi prints it),
    compute capability, and the PCIe generation and width of its slot."""

    name: str
    memory_mib: int
    compute_capability: str
    pcie_gen: int
    pcie_width: int


# Memory: the "FB Memory Usage / Total" (or the Memory-Usage column) of public nvidia-smi outputs.
A100_SXM4_80GB = Board("NVIDIA A100-SXM4-80GB", 81920, "8.0", 4, 16)
H100_SXM_80GB = Board("NVIDIA H100 80GB HBM3", 81559, "9.0", 5, 16)
V100_SXM2_32GB = Board("Tesla V100-SXM2-32GB", 32510, "7.0", 3, 16)
RTX_3090 = Board("NVIDIA GeForce RTX 3090", 24576, "8.6", 4, 16)
RTX_4090 = Board("NVIDIA GeForce RTX 4090", 24564, "8.9", 4, 16)
L40S = Board("NVIDIA L40S", 46068, "8.9", 4, 16)
RTX_PRO_6000 = Board("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97887, "12.0", 5, 16)
A100_PCIE_80GB = Board("NVIDIA A100 80GB PCIe", 81920, "8.0", 4, 16)
A100_SXM4_40GB = Board("NVIDIA A100-SXM4-40GB", 40960, "8.0", 4, 16)
# The A30 of vllm#29070: its PCIe generation and width were not captured.
A30 = Board("NVIDIA A30", 24576, "8.0", None, None)
# A GB200 GPU reaches its Grace CPU over NVLink-C2C: no PCIe slot generation or width was captured.
GB200 = Board("NVIDIA GB200", 189471, "10.0", None, None)


@dataclass(frozen=True)
class Machine:
    name: str
    description: str
    topology: Topology
    sources: tuple[str, ...]
    inferred: tuple[str, ...]
    published: tuple[dict, ...] = ()  # benchmark figures published for such a machine, with their source

    def profile(self) -> dict:
        topology = replace(self.topology, published=self.published)
        return recorded.profile_dict(self.name, topology, self.description, self.sources, self.inferred)


def bus_id(bus: int | str) -> str:
    """NVML's form of a PCI bus id: a bus number on domain 0 (device 0, function 0) gives
    ``00000000:07:00.0``; a whole id is taken as written."""
    return bus if isinstance(bus, str) else f"00000000:{bus:02X}:00.0"


def synthetic_uuid(machine: str, index: int) -> str:
    """A UUID that is plainly not a real GPU's: all-zero first group, the machine name hashed in."""
    h = hashlib.sha256(machine.encode("utf-8")).hexdigest()
    return f"GPU-00000000-{h[:4]}-4{h[4:7]}-8{h[7:10]}-{index:012x}"


UUIDS = "gpus[*].uuid: synthetic (GPU-00000000-<hash of the machine name>-<index>), not a real GPU's"
LOADED_LINK = ("gpus[*].pcie_gen_current, gpus[*].pcie_width_current: equal to the max, as a loaded link "
               "reports them (an idle GPU's link drops, often to Gen1, to save power; nvidia-smi --help-query-gpu: "
               "'These may be reduced when the GPU is not in use.')")
PCIE_PAIR_CAPS = ("links[*].p2p.nvlink, links[*].p2p.atomics of pairs without NVLink: NS, as public "
                  "`nvidia-smi topo -p2p n` / `-p2p a` outputs show on PCIe-only pairs (2x H100 NVL: "
                  "'topo -p2p n: NS', find_string id 59791247185; a PCIe pair: 'topo -p2p nvl = NS; "
                  "topo -p2p a = NS', find_string id 71105197540), not captured on this machine")

NVLINK_P2P = P2P(read=OK, write=OK, nvlink=OK, atomics=OK)


def pcie_p2p(read_write: P2PStatus) -> P2P:
    """The P2P status of a pair without NVLink: read/write as the driver reports them, and NS for
    the NVLink path and for atomics (PCIe P2P atomics are not reported OK)."""
    return P2P(read=read_write, write=read_write, nvlink=NS, atomics=NS)


def nvlink_count(a: Gpu, b: Gpu) -> int:
    """The ``#`` of ``NV#`` as nvidia-smi computes it: the active links of ``a`` whose remote is
    ``b``; on an NVSwitch fabric, the smaller number of active switch links of the two GPUs."""
    direct = sum(1 for ln in a.nvlinks
                 if ln.active and ln.remote_type == "GPU" and ln.remote_bus_id == b.pci_bus_id)
    if direct:
        return direct
    return min(sum(1 for ln in g.nvlinks if ln.active and ln.remote_type == "SWITCH") for g in (a, b))


def tiers(*levels: tuple[Sequence[int], LinkClass], default: LinkClass = SYS) -> Callable[[int, int], LinkClass]:
    """The PCIe class of a pair from groupings of the GPUs, closest first: ``tiers((switch, PIX),
    (socket, NODE))`` gives PIX to GPUs on one switch, NODE to GPUs on one socket, else SYS."""
    def pcie(a: int, b: int) -> LinkClass:
        for groups, cls in levels:
            if groups[a] == groups[b]:
                return cls
        return default
    return pcie


def uniform(cls: LinkClass) -> Callable[[int, int], LinkClass]:
    return lambda a, b: cls


def switch_nvlinks(switch_buses: Sequence[int], version: str) -> Callable[[int], tuple[NvLink, ...]]:
    """Every GPU's NVLinks into an NVSwitch fabric: link ``i`` leads to the switch at ``switch_buses[i]``."""
    links = tuple(NvLink(link=i, active=True, remote_bus_id=bus_id(b), remote_type="SWITCH", version=version)
                  for i, b in enumerate(switch_buses))
    return lambda gpu: links


def mesh_nvlinks(wiring: Mapping[tuple[int, int], int], buses: Sequence[int],
                 version: str) -> Callable[[int], tuple[NvLink, ...]]:
    """Direct GPU-to-GPU NVLinks: ``wiring[(a, b)]`` links join GPUs ``a < b``. A GPU's links are
    numbered in the order of its peers' indices."""
    def links(gpu: int) -> tuple[NvLink, ...]:
        peers = sorted((b if a == gpu else a, n) for (a, b), n in wiring.items() if gpu in (a, b))
        remotes = [peer for peer, n in peers for _ in range(n)]
        return tuple(NvLink(link=i, active=True, remote_bus_id=bus_id(buses[peer]), remote_type="GPU",
                            version=version) for i, peer in enumerate(remotes))
    return links


def box(name: str, board: Board, buses: Sequence[int | str], *, pcie: Callable[[int, int], LinkClass | None],
        read_write: P2PStatus, numa: Sequence[int] | None = None, affinity: Sequence[str] | None = None,
        nvlinks: Callable[[int], tuple[NvLink, ...]] | None = None, **fields) -> Topology:
    """A machine of identical GPUs, numbered in PCI bus order (index == nvml_index). A pair joined by
    NVLink gets all-OK P2P; any other pair gets ``pcie_p2p(read_write)``."""
    assert list(buses) == sorted(buses), f"{name}: bus ids must ascend with the index (CUDA PCI order)"
    gpus = tuple(
        Gpu(index=i, name=board.name, uuid=synthetic_uuid(name, i), pci_bus_id=bus_id(bus), nvml_index=i,
            numa_node=None if numa is None else numa[i],
            cpu_affinity=None if affinity is None else affinity[i],
            pcie_gen_current=board.pcie_gen, pcie_gen_max=board.pcie_gen,
            pcie_width_current=board.pcie_width, pcie_width_max=board.pcie_width,
            memory_total_bytes=board.memory_mib * MiB, compute_capability=board.compute_capability,
            nvlinks=() if nvlinks is None else nvlinks(i))
        for i, bus in enumerate(buses))
    links = []
    for a in range(len(gpus)):
        for b in range(a + 1, len(gpus)):
            nv = nvlink_count(gpus[a], gpus[b])
            links.append(Link(a=a, b=b, pcie=pcie(a, b), nvlinks=nv,
                              p2p=NVLINK_P2P if nv else pcie_p2p(read_write)))
    return Topology(gpus=gpus, links=tuple(links), **fields)


def nvswitch_box(name: str, board: Board, buses: Sequence[int], *, switch_buses: Sequence[int], version: str,
                 **kw) -> Topology:
    """Every GPU wired into one NVSwitch fabric (NV<links> between every pair); P2P OK everywhere."""
    return box(name, board, buses, read_write=OK, nvlinks=switch_nvlinks(switch_buses, version), **kw)


def nvlink_mesh_box(name: str, board: Board, buses: Sequence[int], *, wiring: Mapping[tuple[int, int], int],
                    version: str, **kw) -> Topology:
    """GPUs joined pairwise by NVLink bridges or a cube mesh; other pairs over PCIe."""
    return box(name, board, buses, nvlinks=mesh_nvlinks(wiring, buses, version), **kw)


def pcie_box(name: str, board: Board, buses: Sequence[int], **kw) -> Topology:
    """GPUs on PCIe only, no NVLink."""
    return box(name, board, buses, **kw)


def degrade(base: Machine, name: str, description: str, *, nvlinks_down: int | None = None,
            pcie_trained: tuple[int, int, int] | None = None, read_write: P2PStatus | None = None,
            sources: Sequence[str] = (), inferred: Sequence[str] = ()) -> Machine:
    """A twin of ``base`` with one thing broken (copy, then change):

    - ``nvlinks_down=g``: every NVLink of GPU ``g`` inactive; its pairs fall back to their PCIe class
      and to PCIe P2P (read/write still OK, NVLink path NS);
    - ``pcie_trained=(g, gen, width)``: GPU ``g``'s link trained down (the max stays);
    - ``read_write=status``: P2P read and write refused with ``status`` for every pair.
    """
    # No health facts: the base's were read on its node, and say nothing of a twin's (broken in code)
    gpus = [replace(g, health=None) for g in base.topology.gpus]
    if nvlinks_down is not None:
        g = gpus[nvlinks_down]
        gpus[g.index] = replace(g, multicast=None,  # off the fabric: what CUDA then says is not captured
                                nvlinks=tuple(replace(ln, active=False, remote_bus_id=None, remote_type="unknown")
                                              for ln in g.nvlinks))
    if pcie_trained is not None:
        g, gen, width = pcie_trained
        gpus[g] = replace(gpus[g], pcie_gen_current=gen, pcie_width_current=width)
    links = []
    for ln in base.topology.links:
        nv = nvlink_count(gpus[ln.a], gpus[ln.b])
        if nv != ln.nvlinks:
            ln = replace(ln, nvlinks=nv, p2p=NVLINK_P2P if nv else pcie_p2p(OK))
        if read_write is not None:
            ln = replace(ln, p2p=replace(ln.p2p, read=read_write, write=read_write))
        links.append(ln)
    topology = replace(base.topology, gpus=tuple(gpus), links=tuple(links))
    twin = (f"(whole profile): a degraded twin constructed in code from the bundled machine "
            f"'{base.name}' (copy, then change); the degradation itself is not a capture",)
    return Machine(name, description, topology, base.sources + tuple(sources),
                   base.inferred + twin + tuple(inferred))


def driver_cuda(driver: str, cuda: str, ids: Sequence[str], shown: str) -> tuple[str, str]:
    """The source and the inferred line of the CUDA version a driver reports (nvidia-smi's "CUDA
    Version", NVML's ``nvmlSystemGetCudaDriverVersion``: the CUDA of the driver's own libcuda, fixed by
    the driver build, the same on every host of that driver), taken from public nvidia-smi tables of
    that driver version where the machine's own capture prints the driver only. ``shown``: the line as
    those tables print it."""
    source = (f"public nvidia-smi tables of hosts on driver {driver} (find_string ids {', '.join(ids)}): "
              f"'{shown}'")
    inferred = (f"cuda_driver_version: '{cuda}', the CUDA version driver {driver} reports on every host (the "
                f"driver's own libcuda, fixed by its build), as public nvidia-smi tables of that driver print "
                f"it; the machine's capture prints the driver version only")
    return source, inferred


# ---------------------------------------------------------------------------------------------
# The machines


def dgx_a100() -> Machine:
    name = "dgx-a100"
    numa = (3, 3, 1, 1, 7, 7, 5, 5)
    topology = nvswitch_box(
        name, A100_SXM4_80GB, (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD),
        # 2 links to each of the 6 NVSwitches, in the order nccl#1505 lists them for GPU0
        switch_buses=(0xC7, 0xC7, 0xC4, 0xC4, 0xC6, 0xC6, 0xC9, 0xC9, 0xC5, 0xC5, 0xC8, 0xC8),
        version="3.1",
        numa=numa,
        affinity=("48-63", "48-63", "16-31", "16-31", "112-127", "112-127", "80-95", "80-95"),
        pcie=tiers((numa, PXB)),
        nics=tuple(f"mlx5_{i}" for i in range(18)),
    )
    return Machine(
        name,
        "8x NVIDIA A100-SXM4-80GB on 6 NVSwitches (NV12 between every pair, 12 NVLinks per GPU), "
        "2 AMD EPYC sockets in NPS4 (8 NUMA nodes, 2 GPUs per node), 18 mlx5 NICs. Topology as "
        "`nvidia-smi topo -m` shows it on an 8x A100 SXM4 node (Tim Cowen's OCI HPC notes), with the DGX A100 "
        "PCI layout.",
        topology,
        sources=(
            "Tim Cowen's Oracle OCI HPC operations notes, a file on GitHub (`nvidia-smi topo -m` on node GPU-87, "
            "an 8-GPU A100 SXM4 node): NV12 between "
            "every GPU pair; NUMA affinity 3,3,1,1,7,7,5,5; CPU affinity 48-63,48-63,16-31,16-31,112-127,"
            "112-127,80-95,80-95; NICs mlx5_0..mlx5_17; each GPU is PXB to the NICs of its own NUMA node "
            "and SYS to all others",
            "https://github.com/NVIDIA/nccl/issues/1505 (NCCL topology dump and `topo -m` of a DGX A100): "
            "GPU0 at 0000:07:00.0 (device 0x20b0, sm 80, PCIe 16 GT/s x16) with 2 NVLinks to each of the 6 "
            "NVSwitches 0000:c4..c9:00.0 (tclass 0x068000), listed c7,c4,c6,c9,c5,c8; NUMA 3,3,1,1,7,7,5,5",
            "https://github.com/pc2/cc-slurm-sync Readme.md ('n2dgx' accelerator map of the Noctua 2 DGX A100 "
            "nodes): GPU bus ids 07,0F,47,4E,87,90,B7,BD for GPUs 0-7",
            "https://github.com/NVIDIA/nccl-tests/issues/228 (`nvidia-smi nvlink -s`, NVIDIA A100-SXM4-80GB): "
            "12 links per GPU, each 25 GB/s",
            "https://github.com/open-mpi/hwloc/issues/658 ('A100 returns 5 which is not NVLink 5 but rather NVLink "
            "version 3') with NVIDIA's nvml.h (NVIDIA/go-nvml gen/nvml/nvml.h: NVML_NVLINK_VERSION_3_1 = 5): "
            "nvmlDeviceGetNvLinkVersion = 5 on A100, hence version '3.1'",
            "public nvidia-smi table of an 8x A100-SXM4-80GB node (find_string id 5915182574): 81920 MiB "
            "per GPU",
            "NVIDIA DCGM (https://github.com/NVIDIA/DCGM, dcgmlib/src/DcgmTopology.cpp, PopulateTopologyNvLink): "
            "on an NVSwitch system every pair's NV# is the GPU's number of Up NVLinks, e.g. DGX A100 NV12 "
            "(nccl#1505)",
        ),
        inferred=(
            UUIDS,
            "gpus[*].pci_bus_id: the DGX A100 layout (pc2/cc-slurm-sync, nccl#1505), not read on the OCI node "
            "whose matrix this profile uses (its notes do not show bus ids)",
            "gpus[*].nvlinks[*].remote_bus_id: which link number leads to which NVSwitch is inferred "
            "(nccl#1505 gives 2 links per switch, not the link numbers); every GPU is given GPU0's order",
            LOADED_LINK,
            "links[*].pcie: PXB within a NUMA node, SYS across, inferred from the GPU-NIC columns of the OCI "
            "notes' matrix (nvidia-smi hides a GPU pair's PCIe class behind NV12)",
            "links[*].p2p: OK for read, write, nvlink and atomics, inferred from the NVSwitch fabric (NCCL "
            "uses P2P/CUMEM/read between NVLink-connected A100s in the NCCL_DEBUG=INFO log of "
            "https://github.com/nkotikal/NCCL-Tensor-Parallelism README.md, which needs NVML read and write OK)",
            "driver_version, cuda_driver_version, cuda_runtime_version, nccl_version: unknown (the OCI notes' "
            "session, nccl#1505's topology dump and pc2/cc-slurm-sync print no version; a version of another "
            "A100 node would describe another machine)",
        ),
        published=(
            {"kind": "allreduce", "gbps": 234.89, "gpus": 8, "size_bytes": 16 * 2**30,
             "source": "ml-engineering network/README.md (https://github.com/stas00/ml-engineering; all_reduce_bench "
                       "on 8x A100 SXM, 16 GiB payload)"},
            {"kind": "p2p", "gbps": 272.0,
             "source": "ml-engineering network/README.md (https://github.com/stas00/ml-engineering; unidirectional "
                       "P2P writes ~272-277 GB/s on 8x A100 SXM); the low end of the range"},
            {"kind": "h2d", "gbps": 25.7, "pinned": True,
             "source": "gengwg/gpu nvda_gpu_benchmark.md (https://github.com/gengwg/gpu; bandwidthTest on DGX A100, "
                       "32 MB, pinned H2D 25.7 GB/s)"},
            {"kind": "h2d", "gbps": 10.0, "pinned": False,
             "source": "gengwg/gpu nvda_gpu_benchmark.md (https://github.com/gengwg/gpu; bandwidthTest on DGX A100, "
                       "32 MB, pageable H2D 10.0 GB/s)"},
        ),
    )


# The two sockets of the HGX H100 node of the SGLang/Mooncake guide (test corpus topo/003): GPUs 0-3 on NUMA
# node 0, 4-7 on 1.
HGX_H100_NUMA = (0, 0, 0, 0, 1, 1, 1, 1)


def captured_health(path: str) -> dict:
    """Each GPU's health facts (``model.GpuHealth``) by bus id, as ``gputopo record`` reads the
    ``nvidia-smi -q`` report at ``path`` (of the repository)."""
    from pytest_gputopo.parse.smi_q import parse_smi_q

    listing = parse_smi_q((ROOT / path).read_text(encoding="utf-8"))
    return {g.pci_bus_id: g.health for g in listing.gpus}


def hgx_h100() -> Machine:
    name = "hgx-h100"
    topology = nvswitch_box(
        name, H100_SXM_80GB, (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB),
        # GPU0 of nccl#1182 (`nvidia-smi nvlink -R`): links 0-17 and the NVSwitch each leads to
        switch_buses=(0x07, 0x07, 0x06, 0x06, 0x07, 0x07, 0x06, 0x06, 0x05,
                      0x05, 0x07, 0x06, 0x08, 0x08, 0x05, 0x05, 0x08, 0x08),
        version="4.0",
        numa=HGX_H100_NUMA,
        affinity=("0-47,96-143",) * 4 + ("48-95,144-191",) * 4,
        pcie=tiers((HGX_H100_NUMA, NODE)),
        nics=tuple(f"mlx5_{i}" for i in range(8)),
        driver_version="570.124.06",
    )
    health = captured_health("tests/smi_q/hgx-h100-x8-565.txt")  # the thamada/nvidia-smi node's, by bus id
    topology = replace(topology, gpus=tuple(replace(g, multicast=True, health=health[g.pci_bus_id])
                                            for g in topology.gpus),
                       cuda_runtime_version="12.9", cuda_driver_version="12.8")
    cuda_source, cuda_inferred = driver_cuda("570.124.06", "12.8", ("56151895528", "52367432882"),
                                             "Driver Version: 570.124.06     CUDA Version: 12.8")
    return Machine(
        name,
        "HGX H100: 8x NVIDIA H100 80GB HBM3 (SXM) on NVSwitches (NV18 between every pair, 18 NVLinks 4.0 "
        "per GPU), PCIe Gen5 x16, 2 sockets (GPUs 0-3 / 4-7), 8 mlx5 NICs.",
        topology,
        sources=(
            "a Chinese SGLang/Mooncake deployment guide, a file on GitHub (`python3 -m sglang.check_env`, section "
            "'NVIDIA Topology:', sglang 0.5.9, 8x NVIDIA H100 80GB HBM3, driver 570.124.06; the same matrix is "
            "in sgl-project/sglang#20855, cited below): NV18 between every GPU pair; NUMA affinity 0,0,0,0,1,1,1,1; "
            "CPU affinity "
            "0-47,96-143 (GPUs 0-3) and 48-95,144-191 (GPUs 4-7); NICs mlx5_0..mlx5_7; GPU-NIC classes PIX/"
            "NODE within a socket, SYS across",
            "Korean RHEL AI installation notes, a file on GitHub (section 3.1.16, `nvidia-smi topo --matrix` in a "
            "VM with 8x H100 80GB HBM3, fabric manager running): NV18 between every "
            "pair; 18 NVLinks x 26.562 GB/s per GPU",
            "https://github.com/thamada/nvidia-smi nvsim/H100SXMx8_smi.py (`nvidia-smi` and `-a` of an 8x "
            "H100 SXM node, driver 565.57.01): bus ids 18,2A,3A,5D,9A,AB,BA,DB; FB memory total 81559 MiB; "
            "PCIe generation max/current 5, width max/current 16x; product name NVIDIA H100 80GB HBM3; each GPU's "
            "health at rest, as gputopo record reads its -q (tests/smi_q/hgx-h100-x8-565.txt): no uncorrectable "
            "ECC error, no row remapping pending or failed, only Idle among the clocks event reasons, persistence "
            "on, VBIOS 96.00.74.00.01, InfoROM G520.0200.00.05",
            "https://github.com/NVIDIA/nccl/issues/1182 (`nvidia-smi nvlink -R`, NVIDIA H100 80GB HBM3): "
            "GPU0's links 0-17 lead to the NVSwitches 00000000:05..08:00.0, 4/5/5/4 links each",
            "a raw nccl-tests log of an Inspur NF5688M7 server (8x H800 HGX, NVSwitch) published as a file on "
            "GitHub (NCCL_DEBUG=INFO): every ring step via P2P/CUMEM/read",
            "NVIDIA DCGM (https://github.com/NVIDIA/DCGM, dcgmlib/src/DcgmTopology.cpp, PopulateTopologyNvLink): "
            "NVSwitch NV# = the GPU's number of Up NVLinks, 18 on H100",
            "the same Inspur NF5688M7 log: 'NVLS multicast support is available on dev 0' .. 'dev 7' (NCCL's "
            "ncclNvlsInit asks CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, https://github.com/NVIDIA/nccl "
            "src/transport/nvls.cc)",
            "https://github.com/sgl-project/sglang/issues/20855 (`python3 -m sglang.check_env` of the node of the "
            "SGLang/Mooncake guide: the same 8x NVIDIA H100 80GB HBM3 matrix, driver 570.124.06, sglang 0.5.9): "
            "'PyTorch: 2.9.1+cu129', torch built with CUDA 12.9; it prints no NCCL version",
            cuda_source,
            "a Korean burn-in report of an 8x NVIDIA H100 80GB HBM3 node (2x Xeon Platinum 8462Y+), a Markdown "
            "file on GitHub (find_string id 62193952648): nvbandwidth v0.10.0 (driver 595.71.05) "
            "host_to_device_memcpy_ce 55.33-55.37 GB/s and device_to_host_memcpy_ce 55.18-55.26 GB/s on every "
            "GPU",
        ),
        inferred=(
            UUIDS,
            "cuda_runtime_version: '12.9', read off the torch wheel tag 2.9.1+cu129 of sglang#20855 (check_env "
            "prints the torch version, not torch.version.cuda itself); nccl_version: unknown (check_env prints no "
            "NCCL version and the issue shows no NCCL log line; the Inspur H800 log's 'NCCL version 2.18.3' is "
            "another node's, with another torch)",
            cuda_inferred + " (check_env's 'CUDA Driver Version: 570.124.06' is the driver's version; the CUDA "
            "12.7 of thamada/nvidia-smi belongs to that node's driver 565.57.01)",
            "gpus[*].pci_bus_id: a typical HGX H100 layout read on another node (thamada/nvidia-smi), not on "
            "the node of the SGLang/Mooncake guide whose matrix this profile uses",
            "gpus[*].nvlinks[*].remote_bus_id: GPU0's link-to-NVSwitch mapping from nccl#1182 given to every "
            "GPU (other GPUs of that node use other link numbers)",
            "gpus[*].nvlinks[*].version: '4.0' (H100 is NVLink 4; NVML's encoded value on H100 was not seen "
            "in a capture)",
            "links[*].pcie: NODE within a socket, SYS across, inferred from the GPU-NIC columns of the "
            "SGLang/Mooncake guide's matrix (nvidia-smi hides a GPU pair's PCIe class behind NV18)",
            "links[*].p2p: OK for read, write, nvlink and atomics, inferred from the NVSwitch fabric (NCCL uses "
            "P2P on these boxes, as the Inspur NF5688M7 H800 log shows, which needs NVML read and write OK)",
            "gpus[*].multicast: true, as CUDA reports it on the HGX H800 node of the Inspur NF5688M7 log (same "
            "board and "
            "NVSwitch fabric, fabric manager running); the other bundled machines leave it unknown",
        ),
        published=(
            {"kind": "allreduce", "gbps": 370.0, "gpus": 8,
             "source": "https://github.com/NVIDIA/nccl-tests/issues/212 (sjeaugey: HGX H100 ring all-reduce ~370 GB/s "
                       "busbw at large sizes)",
             "note": "ring (NCCL_ALGO=Ring); with NVLink SHARP the same node peaks near 480 GB/s busbw, which no "
                     "longer describes a link"},
            {"kind": "p2p", "gbps": 364.0,
             "source": "ml-engineering network/README.md (https://github.com/stas00/ml-engineering; 8x H100 SXM "
                       "unidirectional P2P 364-393 GB/s, typical 376); the low end of the range"},
            {"kind": "h2d", "gbps": 55.33, "pinned": True,
             "source": "a Korean burn-in report of an 8x H100 80GB HBM3 node, a Markdown file on GitHub (find_string "
                       "id 62193952648): nvbandwidth v0.10.0 host_to_device_memcpy_ce, 55.33-55.37 GB/s on all 8 "
                       "GPUs; the lowest cell",
             "note": "each GPU's own PCIe 5.0 x16 link to the host; ml-engineering network/README.md "
                     "(https://github.com/stas00/ml-engineering) measures the same testcase at 55.43 GB/s on an "
                     "8x H200 node of the same links"},
            {"kind": "d2h", "gbps": 55.18, "pinned": True,
             "source": "the same burn-in report (find_string id 62193952648): nvbandwidth v0.10.0 "
                       "device_to_host_memcpy_ce, 55.18-55.26 GB/s on all 8 GPUs; the lowest cell",
             "note": "ml-engineering network/README.md (https://github.com/stas00/ml-engineering): 55.06 GB/s on "
                     "an 8x H200 node of the same PCIe 5.0 x16 links"},
        ),
    )


# NV# between GPU pairs a < b in the 8x V100 SXM2 hybrid cube mesh of the UCX-Py notes (test corpus topo/036).
DGX1_WIRING = {(0, 1): 2, (0, 2): 1, (0, 3): 2, (0, 6): 1, (1, 2): 2, (1, 3): 1, (1, 7): 1,
               (2, 3): 1, (2, 4): 2, (3, 5): 2, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2,
               (5, 7): 1, (6, 7): 2}


def dgx1_v100() -> Machine:
    name = "dgx1-v100"
    buses = (0x06, 0x07, 0x0A, 0x0B, 0x85, 0x86, 0x89, 0x8A)
    topology = nvlink_mesh_box(
        name, V100_SXM2_32GB, buses, wiring=DGX1_WIRING, version="2.0",
        numa=(0,) * 8, affinity=("0-19",) * 8, pcie=uniform(NODE), read_write=OK,
    )
    return Machine(
        name,
        "8x Tesla V100-SXM2-32GB in the DGX-1V hybrid cube mesh (NV1/NV2 direct links, 6 NVLink 2.0 "
        "per GPU) as an Azure NDv2-class VM shows it (UCX-Py benchmark notes): every pair without NVLink is "
        "NODE, one NUMA node. (A bare-metal dual-socket DGX-1 shows SYS there instead.)",
        topology,
        sources=(
            "UCX-Py benchmark setup notes, a file on GitHub (`nvidia-smi topo -m` on an Azure VM with 8 GPUs and "
            "InfiniBand; the notes link rapidsai/ucx-py#311): the NV1/NV2 matrix of every pair (each GPU 6 links "
            "to 4 peers), NODE "
            "for every other pair, CPU affinity 0-19 and NUMA affinity 0 for every GPU, no NIC in the matrix",
            "https://github.com/NVIDIA/nccl/issues/671 (NCCL topology dump of a DGX-1 V100): GPU bus ids "
            "06,07,0a,0b,85,86,89,8a, sm 70, PCIe 8 GT/s x16 (Gen3), NVLink counts 1 or 2 per peer",
            "https://github.com/Azure/azhpc-diagnostics/issues/73: V100 `nvidia-smi nvlink -s` lists 25.781 GB/s "
            "links",
            "public nvidia-smi tables of Tesla V100-SXM2-32GB (find_string id 15064665090): 32510 MiB",
        ),
        inferred=(
            UUIDS,
            "gpus[*].name: Tesla V100-SXM2-32GB, the GPU of Azure NDv2, the VM class the UCX-Py notes' matrix "
            "fits (the matrix does not name the GPU)",
            "gpus[*].pci_bus_id: a bare-metal DGX-1 V100's bus ids (nccl#671), not the VM's (not shown); the "
            "cube-mesh wiring is the UCX-Py notes' numbering, which differs from nccl#671's",
            "gpus[*].nvlinks[*].link: link numbers given in the order of the peer GPU indices",
            "gpus[*].nvlinks[*].version: '2.0' (V100 is NVLink 2; NVML's encoded value on V100 was not seen)",
            LOADED_LINK,
            "links[*].pcie of NVLink pairs: NODE like every other pair of this one-NUMA-node VM (nvidia-smi "
            "hides it behind NV#)",
            "links[*].p2p: read/write OK for every pair (V100 SXM2 boards report peer access between all "
            "GPUs); nvlink and atomics OK on NVLink pairs",
            "driver_version, cuda_driver_version, cuda_runtime_version, nccl_version: unknown (the UCX-Py notes' "
            "session and nccl#671's topology dump print no version)",
            PCIE_PAIR_CAPS,
        ),
        published=tuple(
            {"kind": "p2p_bidir", "gbps": DGX1_BIDIR[nv], "src": a, "dst": b,
             "source": f"{DGX1_BIDIR_SOURCE}: GPU0's row, {DGX1_BIDIR_CELLS[nv]}",
             "note": f"an NV{nv} pair of another DGX-1 V100, given to this machine's NV{nv} pairs (the two "
                     f"number their GPUs otherwise); both directions' bytes, as p2pBandwidthLatencyTest counts "
                     f"them; pairs without NVLink have none (the notebook's DGX-1 is dual-socket, this VM one node)"}
            for (a, b), nv in sorted(DGX1_WIRING.items())),
    )


# Bidirectional P2P=Enabled of p2pBandwidthLatencyTest on "a DGX system with 8 Tesla V100s" (GPU0's row only),
# the lowest cell of each NVLink count.
DGX1_BIDIR = {1: 48.49, 2: 96.85}
DGX1_BIDIR_CELLS = {1: "48.49 GB/s to its NV1 peers GPU1 and GPU2",
                    2: "96.85 and 96.90 GB/s to its NV2 peers GPU3 and GPU4; the lowest"}
DGX1_BIDIR_SOURCE = (
    "https://github.com/openhackathons-org/gpubootcamp hpc/multi_gpu_nways/labs/CFD/English/C/jupyter_notebook/"
    "advanced_concepts/single_node_topology.ipynb (NVIDIA's GPU bootcamp, 'Partial results obtained from a DGX "
    "system with 8 Tesla V100s': p2pBandwidthLatencyTest 'Bidirectional P2P=Enabled Bandwidth Matrix')")


def rtx3090_nvlink() -> Machine:
    name = "2x-rtx3090-nvlink"
    buses = (0x01, 0x4B)
    topology = nvlink_mesh_box(
        name, RTX_3090, buses, wiring={(0, 1): 4}, version="3.1",
        numa=(0, 0), pcie=uniform(PHB), read_write=OK,
        driver_version="470.57.02", cuda_driver_version="11.4",
    )
    return Machine(
        name,
        "2x NVIDIA GeForce RTX 3090 joined by an NVLink bridge (NV4, NVLink 3.1) on a single-socket "
        "Threadripper workstation; PCIe Gen4 x16 each.",
        topology,
        sources=(
            "https://github.com/NVIDIA/nccl/issues/557 (2x ASUS TUF RTX 3090 with a Gigabyte AORUS NVLink "
            "bridge, Threadripper 3960X, driver 470.57.02, CUDA 11.4): pciBusID 1 and 4b; "
            "p2pBandwidthLatencyTest 'Device=0 CAN Access Peer Device=1' and back",
            "https://github.com/Syllo/nvtop/pull/469 (dual RTX 3090 Founders Edition with an NVLink bridge): "
            "4 physical links per GPU; nvmlNvlinkVersion_t returns 5 = NVLink 3.1",
            "https://github.com/thamada/nvidia-smi gls/RTX3090_smi.py (`nvidia-smi -a`, RTX 3090): FB memory "
            "total 24576 MiB; PCIe generation max 4, width max 16x",
            "huggingface/accelerate#2328: P2P works on NVLinked 3090s (Accelerate had disabled it by product name)",
        ),
        inferred=(
            UUIDS,
            "gpus[*].numa_node: 0 (single-socket Threadripper); gpus[*].cpu_affinity unknown",
            LOADED_LINK,
            "links[0].pcie: PHB, as `topo -m` reads on the analogous two-GPU Threadripper host of "
            "noonghunna/club-3090#1229 (2x RTX 5090, Threadripper 3975WX per the same author's #1133; nccl#557 "
            "shows no `topo -m`; nvidia-smi hides it behind NV4)",
            "links[0].p2p: read/write OK from 'CAN Access Peer' (nccl#557), nvlink OK from the bridge, atomics "
            "OK like other NVLink pairs; no `topo -p2p` capture",
        ),
    )


def a100_40gb_x4() -> Machine:
    name = "4x-a100-40gb"
    topology = nvlink_mesh_box(
        name, A100_SXM4_40GB, (0x07, 0x0F, 0x47, 0x4E), wiring={(0, 1): 12, (2, 3): 10}, version="3.1",
        pcie=uniform(NODE), read_write=OK, driver_version="535.161.08",
    )
    topology = replace(topology, cuda_driver_version="12.2")
    return Machine(
        name,
        "4x NVIDIA A100-SXM4-40GB rented as one node: NVLink only within two pairs (GPU0-GPU1 NV12, GPU2-GPU3 "
        "NV10), NODE between the pairs; 40 GB per GPU.",
        topology,
        sources=(
            "https://github.com/nkotikal/NCCL-Tensor-Parallelism README.md (`nvidia-smi topo -m` of a 4x "
            "A100-SXM4-40GB node rented on Vast.ai, GPU columns only): GPU0-GPU1 NV12, GPU2-GPU3 NV10, every other "
            "pair NODE",
            "public nvidia-smi tables of A100-SXM4-40GB GPUs (find_string ids 67090109663, 13685072400, "
            "66537552328): '40960MiB' memory total each",
            "public burn-in notes of an 8x A100-SXM4-40GB node (find_string id 60859828466; `nvidia-smi nvlink -s "
            "-i 0`, NVIDIA A100-SXM4-40GB, driver 535.161.08): 12 links x 25 GB/s",
            "https://github.com/open-mpi/hwloc/issues/658 with NVIDIA's nvml.h (NVML_NVLINK_VERSION_3_1 = 5): A100 "
            "reports NVLink version 3.1",
            "the same burn-in notes (find_string id 60859828466: `nvidia-smi` of that 8x A100-SXM4-40GB node): "
            "'Driver Version: 535.161.08   CUDA Version: 12.2'",
        ),
        inferred=(
            UUIDS,
            "gpus[*].pci_bus_id: the first four of the DGX A100 layout (07, 0F, 47, 4E); the NCCL-Tensor-Parallelism "
            "matrix shows no bus ids",
            "gpus[*].numa_node, gpus[*].cpu_affinity: unknown (the capture kept only the GPU columns)",
            LOADED_LINK,
            "gpus[2..3].nvlinks: the 10 active links each that NV10 counts; whether the other 2 are listed "
            "inactive is not captured",
            "driver_version: 535.161.08 and cuda_driver_version: 12.2, the driver of the A100-SXM4-40GB node of "
            "the burn-in notes (another node of the same model)",
            "links[*].p2p: read/write OK (NODE pairs of A100s do PCIe P2P), inferred, no `topo -p2p` capture",
        ),
    )


def gb200_tray() -> Machine:
    name = "gb200-tray"
    topology = box(
        name, GB200, ("00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0"),
        nvlinks=lambda gpu: tuple(NvLink(link=i, active=True, remote_type="SWITCH", version="5.0") for i in range(18)),
        read_write=OK, numa=(0, 0, 1, 1), affinity=("0-71",) * 2 + ("72-143",) * 2,
        pcie=lambda a, b: None, nics=tuple(f"mlx5_{i}" for i in range(8)),
        driver_version="580.126.09", cuda_driver_version="13.0",
    )
    return Machine(
        name,
        "One GB200 NVL72 compute tray: 4x NVIDIA GB200 (2 per Grace CPU) with 18 NVLinks each into the rack's "
        "NVLink switch trays (NV18 between every pair), 189471 MiB per GPU, 8 mlx5 NICs.",
        topology,
        sources=(
            "'RHEL4NV Demo', a public OpenShift walkthrough on GB200 nodes (find_string id 51864327511; "
            "`nvidia-smi` and `nvidia-smi topo -m` in one session, driver 580.126.09, CUDA 13.0): 4x NVIDIA GB200 at "
            "00000008/00000009/00000018/00000019:01:00.0, 189471 MiB each; NV18 between every GPU pair; CPU "
            "affinity 0-71 (GPUs 0-1) and 72-143 (GPUs 2-3); NUMA affinity 0,2-17 and 1,18-33; NICs "
            "mlx5_0..mlx5_7, SYS to every GPU",
            "find_string id 61093033028 (`nvidia-smi topo -m` of another GB200 tray): the same matrix",
            "find_string id 54650828460 (NVIDIA isvtest fixture, 4x NVIDIA GB200, driver 595.58.03): the same "
            "bus ids and memory",
        ),
        inferred=(
            UUIDS,
            "gpus[*].numa_node: 0, 0, 1, 1, the CPU node first in each GPU's NUMA affinity (the other listed "
            "nodes are memory-only nodes)",
            "gpus[*].pcie_*: unknown (the GPU attaches to Grace by NVLink-C2C; no PCIe figures captured)",
            "gpus[*].compute_capability: '10.0' (sm_100, Blackwell datacenter), not read from this capture",
            "gpus[*].nvlinks: 18 active links each into the NVLink switch trays (NV18 on an NVSwitch fabric counts "
            "the GPU's Up links, as NVIDIA DCGM's PopulateTopologyNvLink counts them); remote bus ids unknown; "
            "version '5.0' "
            "(Blackwell's NVLink generation), not read",
            "links[*].pcie: unknown (hidden behind NV18, and a GB200 pair has no PCIe path in the capture)",
            "links[*].p2p: OK for read, write, nvlink and atomics, inferred from the NVLink fabric",
            "gpus[*].multicast: unknown (CUDA's multicast attribute on a GB200 tray depends on the rack's fabric "
            "manager and IMEX; the RHEL4NV capture shows neither, nor an NCCL log, and no public output of this tray "
            "says it)",
            "cuda_runtime_version, nccl_version: unknown (the capture shows no torch and no NCCL log)",
        ),
        published=(
            {"kind": "p2p", "gbps": 743.89,
             "source": "ml-engineering network/README.md (https://github.com/stas00/ml-engineering; "
                       "p2pBandwidthLatencyTest 'Unidirectional P2P=Enabled Bandwidth (P2P Writes)' on a GB200 NVL4 "
                       "node, 4 GPUs: 743.89-750.28 GB/s between every pair); the lowest cell",
             "note": "another GB200 tray's figure, published; its P2P Connectivity Matrix is not shown, but 744-750 "
                     "GB/s is NVLink 5's rate (the author: 82.8% of 900), not a copy staged through the host"},
        ),
    )


def rtx4090_x4() -> Machine:
    name = "4x-rtx4090"
    topology = pcie_box(name, RTX_4090, (0x01, 0x25, 0x41, 0x61), pcie=uniform(NODE), read_write=GNS,
                        driver_version="550.127.05", cuda_driver_version="12.4")
    return Machine(
        name,
        "4x NVIDIA GeForce RTX 4090 on PCIe Gen4 x16, no NVLink; the driver refuses P2P for every pair "
        "(GNS: GeForce cards do not support P2P with the stock driver).",
        topology,
        sources=(
            "https://github.com/yiguCM/pptest_driver README.md (all_reduce_perf on host GPU-RTX4090-4-4): 4x NVIDIA "
            "GeForce RTX 4090 at "
            "bus 0x01, 0x25, 0x41, 0x61 (P2P there only with a patched kernel module)",
            "https://github.com/thamada/nvidia-smi package/RTX4090_smi.py (`nvidia-smi -a` of an 8x RTX 4090 "
            "node at buses 01,25,41,61,81,A1,C1,E1, driver 550.127.05): FB memory total 24564 MiB; PCIe "
            "generation max 4, width max 16x; 'Driver Version : 550.127.05', 'CUDA Version : 12.4'",
            "https://github.com/NVIDIA/TensorRT-LLM/issues/2225 (NCCL log of an RTX 4090 server): NCCL "
            "'P2P is disabled between connected GPUs' for every pair (NVML read/write not OK)",
            "https://github.com/NVIDIA/nccl-tests/issues/287 (sjeaugey): 'GeForce cards do not support P2P'",
            "https://github.com/noonghunna/club-3090/issues/1229 (a 2x GeForce RTX 5090 host): the pair reports "
            "GNS in `nvidia-smi topo -p2p rw`",
            "https://github.com/sgl-project/sglang/issues/4814 (8x RTX 4090): 'peer access is not supported "
            "between these two devices'",
        ),
        inferred=(
            UUIDS,
            "gpus[*].numa_node, gpus[*].cpu_affinity: unknown (not in the sources)",
            LOADED_LINK,
            "links[*].pcie: NODE, inferred from the bus layout (each GPU on its own root complex 0x00/0x20/0x40/"
            "0x60 of one AMD EPYC socket); the host's `topo -m` is not published",
            "driver_version, cuda_driver_version: 550.127.05 and 12.4, the stock driver of the 8x RTX 4090 node of "
            "thamada/nvidia-smi, whose first four GPUs sit at this machine's buses (01, 25, 41, 61); the "
            "pptest_driver README prints no version (its all_reduce_perf ran on a patched P2P module, not this "
            "stock-driver state); cuda_runtime_version, nccl_version: unknown (no torch or NCCL log of this host)",
            "links[*].p2p.read, links[*].p2p.write: GNS, the code `topo -p2p` shows for GeForce RTX 5090 pairs; "
            "not captured on a 4090 (one public note reports CNS on a dual-4090 board, find_string id "
            "62125212643)",
            PCIE_PAIR_CAPS,
        ),
    )


# The "GPU Topology:" section (`nvidia-smi topo -m`) of vllm-project/vllm#4785's collect_env, its GPU
# rows as the capture shows them: GPU0..GPU5 whole; GPU6's row is cut after its first cell and GPU7's
# is not shown, so the GPU6-GPU7 pair and those two GPUs' CPU and NUMA affinity stay unknown.
RTX4090_X8_ROWS = """\
GPU0     X      PIX     PIX     PIX     SYS     SYS     SYS     SYS     0-31,64-95      0
GPU1    PIX      X      PIX     PIX     SYS     SYS     SYS     SYS     0-31,64-95      0
GPU2    PIX     PIX      X      PIX     SYS     SYS     SYS     SYS     0-31,64-95      0
GPU3    PIX     PIX     PIX      X      SYS     SYS     SYS     SYS     0-31,64-95      0
GPU4    SYS     SYS     SYS     SYS      X      PIX     PIX     PIX     32-63,96-127    1
GPU5    SYS     SYS     SYS     SYS     PIX      X      PIX     PIX     32-63,96-127    1
"""


def shown_rows(text: str, count: int, nics: int = 0) -> tuple[Callable[[int, int], LinkClass | None], list, list]:
    """A `topo -m` matrix of ``count`` GPUs read off the GPU rows a capture shows (``GPUi <count GPU
    cells> <nics NIC cells> <CPU affinity> <NUMA affinity> ...``): the PCIe class of a pair from row
    ``a`` column ``b``, else row ``b`` column ``a`` (the matrix is symmetric), None where neither row is
    shown or the cell is ``NV#`` (nvidia-smi hides the PCIe path behind it); and each GPU's NUMA node and
    CPU affinity, None for a GPU whose row is not shown."""
    rows = {int(cells[0][3:]): cells[1:] for cells in map(str.split, text.splitlines())}
    numa = [int(rows[i][count + nics + 1]) if i in rows else None for i in range(count)]
    affinity = [rows[i][count + nics] if i in rows else None for i in range(count)]

    def pcie(a: int, b: int) -> LinkClass | None:
        for row, col in ((a, b), (b, a)):
            if row in rows:
                cell = rows[row][col]
                return None if cell.startswith("NV") else LinkClass.from_name(cell)
        return None
    return pcie, numa, affinity


def rtx4090_x8() -> Machine:
    name = "8x-rtx4090"
    pcie, numa, affinity = shown_rows(RTX4090_X8_ROWS, 8)
    topology = pcie_box(
        name, RTX_4090, (0x18, 0x19, 0x1A, 0x1B, 0x98, 0x99, 0x9A, 0x9B), numa=numa, affinity=affinity,
        pcie=pcie, read_write=P2PStatus.UNKNOWN, driver_version="525.147.05",
    )
    topology = replace(topology, cuda_runtime_version="12.1", nccl_version="2.20.5", cuda_driver_version="12.0")
    cuda_source, cuda_inferred = driver_cuda("525.147.05", "12.0", ("67199173169", "23127717072"),
                                             "Driver Version: 525.147.05   CUDA Version: 12.0")
    return Machine(
        name,
        "8x NVIDIA GeForce RTX 4090 on PCIe (no NVLink) in a two-NUMA-node server: GPU0-3 PIX to each "
        "other, GPU4-7 PIX as far as shown, SYS across the nodes; torch 2.3.0+cu121 (CUDA 12.1) with "
        "NCCL 2.20.5. The GPU6-GPU7 pair, GPU6's and GPU7's affinity and the P2P status are not in the "
        "capture (unknown).",
        topology,
        sources=(
            "https://github.com/vllm-project/vllm/issues/4785 (`python collect_env.py` of an 8x RTX 4090 "
            "node, vLLM 0.4.2): 'PyTorch version: 2.3.0+cu121', 'CUDA used to build PyTorch: 12.1', "
            "'GPU 0: NVIDIA GeForce RTX 4090' .. 'GPU 7: NVIDIA GeForce RTX 4090', 'Nvidia driver version: "
            "525.147.05', '[pip3] nvidia-nccl-cu12==2.20.5', '[pip3] torch==2.3.0', and its 'GPU Topology:' "
            "(`nvidia-smi topo -m`) rows GPU0..GPU5 (RTX4090_X8_ROWS in scripts/build_machines.py)",
            "https://github.com/pytorch/pytorch/blob/0027c653a25545d8fff1b053ddb722a86722adf8/torch/"
            "__init__.py (_load_global_deps, _preload_cuda_deps): a torch wheel with its CUDA libraries as "
            "PyPI dependencies loads libnccl.so.* from site-packages nvidia/nccl/lib, the nvidia-nccl-cu12 "
            "wheel ('As PyTorch is not purelib, but nvidia-*-cu12 is')",
            "https://github.com/thamada/nvidia-smi package/RTX4090_smi.py (`nvidia-smi -a` of an 8x RTX 4090 "
            "node, driver 550.127.05): FB memory total 24564 MiB; PCIe generation max 4, width max 16x",
            cuda_source,
        ),
        inferred=(
            UUIDS,
            cuda_inferred,
            "gpus[*].pci_bus_id: synthetic (collect_env does not print them)",
            "gpus[*].pcie_*, gpus[*].memory_total_bytes, gpus[*].compute_capability: the RTX 4090's (another "
            "node's `nvidia-smi -a`, thamada/nvidia-smi); collect_env prints the model name only",
            "links[6-7].pcie: unknown (GPU6's row of the matrix is cut after its first cell, GPU7's is not "
            "shown); links[6-7].nvlinks: 0, the RTX 4090 has no NVLink",
            "gpus[6..7].numa_node, gpus[6..7].cpu_affinity: unknown (the same cut rows)",
            "links[*].p2p.read, links[*].p2p.write: unknown (no `topo -p2p` capture of this node)",
            "nccl_version: 2.20.5, the nvidia-nccl-cu12 wheel pip lists, which torch's CUDA wheels load; "
            "torch.cuda.nccl.version() itself is not printed (an LD_PRELOAD or LD_LIBRARY_PATH could put "
            "another libnccl first; the listed vllm_nccl_cu11==2.18.1.0.4.0 is vLLM's own NCCL, not torch's)",
            PCIE_PAIR_CAPS,
        ),
    )


# The "GPU Topology:" section (`nvidia-smi topo -m`) of vllm-project/vllm#29070's collect_env (also test
# corpus topo/042), its GPU rows whole.
A30_X4_ROWS = """\
GPU0     X      NV4     SYS     SYS     SYS     0-23,48-71      0               N/A
GPU1    NV4      X      SYS     SYS     SYS     0-23,48-71      0               N/A
GPU2    SYS     SYS      X      NV4     PXB     24-47,72-95     1               N/A
GPU3    SYS     SYS     NV4      X      PIX     24-47,72-95     1               N/A
"""


def a30_x4() -> Machine:
    name = "4x-a30"
    pcie, numa, affinity = shown_rows(A30_X4_ROWS, 4, nics=1)
    topology = nvlink_mesh_box(
        name, A30, (0x17, 0x31, 0x98, 0xB1), wiring={(0, 1): 4, (2, 3): 4}, version="3.1",
        numa=numa, affinity=affinity, pcie=pcie, read_write=P2PStatus.UNKNOWN, nics=("mlx5_0",),
        driver_version="535.274.02",
    )
    topology = replace(topology, cuda_runtime_version="12.8", nccl_version="2.27.3", cuda_driver_version="12.2")
    cuda_source, cuda_inferred = driver_cuda("535.274.02", "12.2", ("70145323771", "12303270769"),
                                             "Driver Version: 535.274.02   CUDA Version: 12.2")
    return Machine(
        name,
        "4x NVIDIA A30 (24 GB, Ampere GA100) in a dual-socket server: two pairs joined by NVLink bridges "
        "(NV4), SYS between the sockets, one mlx5 NIC on socket 1; torch 2.8.0+cu128 (CUDA 12.8) with NCCL "
        "2.27.3. P2P of the SYS pairs is not in the capture (unknown).",
        topology,
        sources=(
            "https://github.com/vllm-project/vllm/issues/29070 (`python collect_env.py` of a 4x A30 node, "
            "vLLM 0.11.1.dev12; the issue body mirrored at find_string id 34802511869): 'PyTorch version              "
            ": 2.8.0+cu128', 'CUDA used to build PyTorch   : 12.8', 'GPU 0: NVIDIA A30' .. 'GPU 3: NVIDIA A30', "
            "'Nvidia driver version        : 535.274.02', '[pip3] nvidia-nccl-cu12==2.27.3', "
            "'[pip3] torch==2.8.0+cu128', and its 'GPU Topology:' (`nvidia-smi topo -m`): "
            "the rows A30_X4_ROWS in scripts/build_machines.py, 'NIC0: mlx5_0'",
            "https://github.com/pytorch/pytorch/blob/0027c653a25545d8fff1b053ddb722a86722adf8/torch/"
            "__init__.py (_load_global_deps, _preload_cuda_deps): a torch wheel with its CUDA libraries as "
            "PyPI dependencies loads libnccl.so.* from site-packages nvidia/nccl/lib, the nvidia-nccl-cu12 "
            "wheel ('As PyTorch is not purelib, but nvidia-*-cu12 is')",
            "public nvidia-smi table of an NVIDIA A30 (find_string id 22246094401): '0MiB / 24576MiB'",
            "NVIDIA BioNeMo's supported-GPU table (find_string id 2923014687): 'A30 | 8.0'",
            "https://github.com/open-mpi/hwloc/issues/658 with NVIDIA's nvml.h (NVML_NVLINK_VERSION_3_1 = 5): A100 "
            "(GA100, the A30's GPU) reports NVLink version 3.1",
            cuda_source,
        ),
        inferred=(
            UUIDS,
            cuda_inferred,
            "gpus[*].pci_bus_id: synthetic (collect_env does not print them)",
            "gpus[*].pcie_*: unknown (collect_env does not print them)",
            "gpus[*].nvlinks[*].version: 3.1, what A100 (GA100, as the A30) reports (hwloc#658); the four "
            "links of each NV4 pair lead to its peer",
            "links[0-1].pcie, links[2-3].pcie: unknown (nvidia-smi hides the PCIe path behind NV4)",
            "links[NV4 pairs].p2p: all OK, as NVLink pairs report; links[SYS pairs].p2p.read/write: unknown "
            "(no `topo -p2p` capture of this node)",
            "nccl_version: 2.27.3, the nvidia-nccl-cu12 wheel pip lists, which torch's CUDA wheels load; "
            "torch.cuda.nccl.version() itself is not printed (the image's NCCL_VERSION=2.25.1-1 names the "
            "CUDA base image's own libnccl, not the wheel's)",
            PCIE_PAIR_CAPS,
        ),
    )


# 8 PCIe GPUs in pairs behind 4 PCIe switches, 2 switches per socket (the 6-GPU server's layout, test corpus
# topo/030, with 4 GPUs per socket).
L40S_SWITCH = (0, 0, 1, 1, 2, 2, 3, 3)
L40S_SOCKET = (0, 0, 0, 0, 1, 1, 1, 1)


def l40s_x8() -> Machine:
    name = "8x-l40s"
    topology = pcie_box(
        name, L40S, (0x1B, 0x1C, 0x3D, 0x3E, 0x89, 0x8A, 0xB1, 0xB2),
        numa=L40S_SOCKET, affinity=("0-23,48-71",) * 4 + ("24-47,72-95",) * 4,
        pcie=tiers((L40S_SWITCH, PIX), (L40S_SOCKET, NODE)), read_write=OK,
        driver_version="550.127.05", cuda_driver_version="12.4",
    )
    return Machine(
        name,
        "8x NVIDIA L40S (PCIe Gen4 x16, no NVLink) in a dual-socket server: GPU pairs behind PCIe switches "
        "(PIX), two switches per socket (NODE), SYS across sockets; the driver reports P2P OK.",
        topology,
        sources=(
            "a public `nvidia-smi topo -m` of a 6-GPU dual-socket PCIe server (a file on GitHub; its address was not "
            "recorded): GPU pairs behind PCIe "
            "switches read PIX, pairs on one socket NODE, across sockets SYS; CPU affinity 0-23,48-71 (NUMA 0) "
            "and 24-47,72-95 (NUMA 1)",
            "https://github.com/thamada/nvidia-smi nvsim/L40S_smi.py (`nvidia-smi -a`, NVIDIA L40S, driver "
            "550.127.05): FB memory total 46068 MiB; PCIe generation max 4, width max 16x; 'Driver Version : "
            "550.127.05', 'CUDA Version : 12.4'",
            "https://github.com/NVIDIA/cuda-samples/issues/284 (2x L4, Ada datacenter, on a SYS pair): peer "
            "access Yes; https://github.com/NVIDIA/nccl/issues/1817 (8x L20): NCCL uses P2P",
            "contrary reports, modelled by the twin 8x-l40s-p2p-disabled: "
            "https://github.com/ai-dynamo/aiconfigurator/issues/1346 (two 8x L40S nodes, 'no GPU P2P'), "
            "https://github.com/NovaSky-AI/SkyRL/pull/108 (L4/L40S without peer access)",
        ),
        inferred=(
            UUIDS,
            "(whole profile): no public `topo -m` of an 8x L40S server was found; the PCIe layout is the 6-GPU "
            "server's pattern (pairs behind switches, dual socket) extended to 4 GPUs per socket",
            "gpus[*].pci_bus_id: synthetic (a switch's two GPUs on neighbouring buses)",
            "gpus[*].numa_node, gpus[*].cpu_affinity: the 6-GPU server's two sockets, 4 GPUs each",
            "driver_version, cuda_driver_version: 550.127.05 and 12.4, the L40S host of thamada/nvidia-smi (the "
            "one L40S capture this profile reads; the 6-GPU server's matrix shows no version); cuda_runtime_version, "
            "nccl_version: unknown (its deviceQuery's 'Runtime Version 12.4' is the sample's own CUDA runtime, "
            "not torch's)",
            LOADED_LINK,
            "links[*].p2p.read, links[*].p2p.write: OK for every pair, inferred from Ada datacenter siblings "
            "(L4 peer access across SYS, cuda-samples#284; 8x L20 NCCL P2P, nccl#1817); public L40S nodes "
            "without P2P exist (aiconfigurator#1346, SkyRL#108): see 8x-l40s-p2p-disabled",
            PCIE_PAIR_CAPS,
        ),
    )


def rtx_pro_6000_x2() -> Machine:
    name = "2x-rtx-pro-6000"
    topology = pcie_box(
        name, RTX_PRO_6000, (0x01, 0x02), numa=(0, 0), affinity=("0-13", "0-13"),
        pcie=uniform(PHB), read_write=OK, driver_version="595.71.05", cuda_driver_version="13.2",
    )
    cuda_source, cuda_inferred = driver_cuda("595.71.05", "13.2", ("54789608385", "52951295611"),
                                             "Driver Version: 595.71.05      CUDA Version: 13.2")
    return Machine(
        name,
        "2x NVIDIA RTX PRO 6000 Blackwell Workstation Edition (96 GB, sm_120) on PCIe 5.0 only, no NVLink, "
        "one host bridge (PHB); the driver reports P2P OK (whether it works depends on IOMMU/ACS).",
        topology,
        sources=(
            "MantraVid, NVLink vs PCIe Parallelism on Blackwell RTX Pro GPUs: A Comprehensive Analysis "
            "(2026-04-27; docs/sources.md): the RTX PRO 6000 Blackwell has no NVLink in any variant, PCIe 5.0 "
            "x16 only",
            "https://github.com/local-inference-lab/rtx6kpro/issues/15 (2x RTX PRO 6000 Blackwell Workstation "
            "Edition, NVLink none, driver 595.71.05): `topo -m` PHB, CPU affinity 0-13, NUMA 0; `nvidia-smi "
            "topo -p2p p`, `-p2p r` and `-p2p w` all OK; NCCL hangs on the first all_reduce unless "
            "NCCL_P2P_DISABLE=1; title 'Lucifer NCCL 2.30.4 hangs on first all_reduce', its summary: 'A minimal "
            "two-rank PyTorch/NCCL `all_reduce` reproduces the problem' with 'the NCCL 2.30.4 runtime in the pinned "
            "Lucifer image'",
            "https://github.com/NVIDIA/nccl/issues/1999 and vllm-project/vllm#33041 (via local-inference-lab/"
            "vllm#262): dual RTX PRO 6000 hang with P2P enabled; cause IOMMU/ACS, P2P reported but unusable",
            "https://github.com/vllm-project/vllm/issues/56128 (4x RTX PRO 6000 Blackwell Server Edition, "
            "driver 580.126.09): GB202, sm_120, PCIe peer-to-peer with the stock driver",
            "public nvidia-smi tables of NVIDIA RTX PRO 6000 Blackwell (find_string id 59293944018): 97887 MiB",
            cuda_source,
        ),
        inferred=(
            UUIDS,
            "gpus[*].pci_bus_id: synthetic (rtx6kpro#15 does not show them)",
            "gpus[*].pcie_*: PCIe 5.0 x16 (the product, per MantraVid's analysis); the desktop of rtx6kpro#15 "
            "ran each GPU at Gen5 x8",
            "gpus[*].name: 'Workstation Edition' as rtx6kpro#15 names the cards",
            "nccl_version, cuda_runtime_version: unknown. rtx6kpro#15 names NCCL 2.30.4 as the "
            "runtime of the image whose PyTorch all_reduce hung, but prints neither torch.cuda.nccl.version() nor "
            "the CUDA torch was built with, so the NCCL torch loads is not shown",
            cuda_inferred + " (rtx6kpro#15 prints no CUDA version)",
            PCIE_PAIR_CAPS,
        ),
    )


def single_gpu() -> Machine:
    name = "single-gpu"
    topology = pcie_box(name, A100_PCIE_80GB, (0xE1,), pcie=uniform(SYS), read_write=OK,
                        driver_version="550.127.08", cuda_driver_version="12.4")
    return Machine(
        name,
        "One NVIDIA A100 80GB PCIe (PCIe Gen4 x16): no GPU pairs at all.",
        topology,
        sources=(
            "public nvidia-smi table of a one-GPU host (find_string id 10932353035, a cluster's 'Change CUDA Version' "
            "page): NVIDIA A100 80GB PCIe at 00000000:E1:00.0, 81920 MiB; its header 'Driver Version: 550.127.08     "
            "CUDA Version: 12.4'",
            "Princeton Research Computing's A100 workshop notes by jdh4 on GitHub (`nvidia-smi topo -m` on an "
            "Adroit node, 4x A100 PCIe): A100 PCIe nodes on PCIe Gen4, no NVLink",
            "https://github.com/intel/torch-xpu-ops/issues/1955: "
            "_CudaDeviceProperties(name='NVIDIA A100 80GB PCIe', major=8, minor=0)",
        ),
        inferred=(
            UUIDS,
            "gpus[0].pcie_*: Gen4 x16, the A100 PCIe's link (not read on this host)",
            "gpus[0].numa_node, gpus[0].cpu_affinity: unknown",
            "cuda_runtime_version, nccl_version: unknown (the page shows no torch; its nvcc 12.1 is the toolkit on "
            "PATH, not torch.version.cuda)",
        ),
        published=tuple(
            {"kind": kind, "gbps": 25.4, "pinned": True,
             "source": f"https://github.com/jdh4/della-gpu-A100 README.md @ 4b00d9e7dc064ba88d9451caf9f44f049dd916f0 "
                       f"(CUDA 11.3 bandwidthTest --memory=pinned --mode=range, 'Device 0: NVIDIA A100-PCIE-40GB' "
                       f"of Princeton's Della): {what}; the lowest of the 200 MB to 1 GB transfers",
             "note": "another host's A100 PCIe (40 GB) on its own PCIe Gen4 x16 link, the link this machine's GPU has"}
            for kind, what in (("h2d", "Host to Device 25.4-26.2 GB/s"), ("d2h", "Device to Host 25.4-26.3 GB/s"))),
    )


def no_gpu() -> Machine:
    return Machine(
        "no-gpu",
        "A machine without an NVIDIA driver: NVML cannot be loaded, so there are no GPUs and no links.",
        Topology(problem="NVML library not found (libnvidia-ml.so.1): no NVIDIA driver installed"),
        sources=(
            "NVIDIA's nvidia-ml-py (https://pypi.org/project/nvidia-ml-py/, pynvml.py _LoadNvmlLibrary): nvmlInit() "
            "without libnvidia-ml.so.1 raises NVMLError_LibraryNotFound (value 12, 'NVML Shared Library Not "
            "Found'), as it does when run on a machine without a GPU",
        ),
        inferred=("problem: the plugin's own wording of NVMLError_LibraryNotFound",),
    )


def machines() -> list[Machine]:
    h100, l40s = hgx_h100(), l40s_x8()
    return [
        dgx_a100(),
        h100,
        dgx1_v100(),
        rtx3090_nvlink(),
        a100_40gb_x4(),
        a30_x4(),
        gb200_tray(),
        rtx4090_x4(),
        rtx4090_x8(),
        l40s,
        rtx_pro_6000_x2(),
        single_gpu(),
        no_gpu(),
        degrade(
            h100, "hgx-h100-nvlink-down",
            "hgx-h100 with GPU5's NVLinks all down: GPU5's 18 links inactive, its pairs fall back to PCIe "
            "(NODE within its socket, SYS across) and to PCIe P2P; every other pair stays NV18.",
            nvlinks_down=5,
            sources=(
                "a public `nvidia-smi topo -m` of 3x RTX A6000 whose author reports GPU2's NVLinks 'all links are "
                "inActive' (a file on GitHub; its address was not recorded): a GPU with inactive "
                "links reads its PCIe class (NODE) in `topo -m`",
                "NVIDIA DCGM (https://github.com/NVIDIA/DCGM, pcie plugin parameter gpu_nvlinks_expected_up) and Azure "
                "HPC health checks (https://github.com/Azure/azurehpc-health-checks, "
                "customTests/azure_gpu_nvlink.nhc, fault code NHC2016) fail a GPU with fewer Up NVLinks than "
                "expected",
            ),
            inferred=(
                "gpus[5].nvlinks[*]: inactive, remote_bus_id None and remote_type unknown (what NVML reports "
                "for the remote end of a down link is not captured)",
                "gpus[5].multicast: unknown (what CUDA reports for a GPU off the NVSwitch fabric is not captured)",
                "links[GPU5 pairs].p2p: read/write OK (P2P over PCIe still reported), nvlink and atomics NS",
            ),
        ),
        degrade(
            h100, "hgx-h100-pcie-x8",
            "hgx-h100 with GPU2's PCIe link trained down to Gen3 x8 (max stays Gen5 x16).",
            pcie_trained=(2, 3, 8),
            sources=(
                "NVIDIA's nvml.h (NVIDIA/go-nvml gen/nvml/nvml.h): nvmlDeviceGetMaxPcieLinkGeneration/Width and "
                "nvmlDeviceGetCurrPcieLinkGeneration/Width, the Max and Current PCIe generation and link width "
                "`nvidia-smi -q -d PCIE` prints per GPU",
                "NVIDIA DCGM (https://github.com/NVIDIA/DCGM, nvvs/diag-skus.yaml.in) sets min_pci_generation/"
                "min_pci_width per SKU (H100: Gen3, x16); aws/aws-k8s-tester PR #806: instances with reduced lanes",
            ),
            inferred=("gpus[2].pcie_gen_current, gpus[2].pcie_width_current: 3 and 8, the constructed fault",),
        ),
        degrade(
            l40s, "8x-l40s-p2p-disabled",
            "8x-l40s with P2P refused by the platform: read and write TNS (topology not supported) for every "
            "pair, as with IOMMU/ACS enabled; NCCL falls back to SHM.",
            read_write=P2PStatus.TOPOLOGY_NOT_SUPPORTED,
            sources=(
                "https://github.com/NVIDIA/nccl/issues/257: P2P hangs with IOMMU enabled, fixed by "
                "intel_iommu=off; https://github.com/NVIDIA/nccl/issues/2079: ACS forced P2P through the IOMMU",
                "https://github.com/ai-dynamo/aiconfigurator/issues/1346 and "
                "https://github.com/NovaSky-AI/SkyRL/pull/108: 8x L40S nodes without GPU P2P",
            ),
            inferred=("links[*].p2p.read, links[*].p2p.write: TNS chosen for the IOMMU/ACS case (the code an "
                      "L40S node reports there was not captured; CNS is what GeForce cards without P2P report, "
                      "so it would read as a card without P2P, not a degraded node)",),
        ),
    ]


# ---------------------------------------------------------------------------------------------
# Output


def render(profile: dict) -> str:
    return json.dumps(profile, indent=1, sort_keys=False) + "\n"


def build() -> dict[str, str]:
    """Every bundled machine's file name and text, in the order written above."""
    out = {}
    for m in machines():
        if f"{m.name}.json" in out:
            raise ValueError(f"machine {m.name!r} is defined twice")
        out[f"{m.name}.json"] = render(m.profile())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder (default {OUT_DIR})")
    args = parser.parse_args(argv)
    files = build()
    stale = sorted(p.name for p in args.out.glob("*.json") if p.name not in files)
    if args.check:
        bad = [n for n, text in files.items()
               if not (args.out / n).is_file() or (args.out / n).read_text(encoding="utf-8") != text]
        for n in bad:
            print(f"{args.out / n}: missing or out of date (run scripts/build_machines.py)", file=sys.stderr)
        for n in stale:
            print(f"{args.out / n}: not produced by scripts/build_machines.py", file=sys.stderr)
        return 1 if bad or stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for n, text in files.items():
        path = args.out / n
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8", newline="\n")
            print(f"wrote {path}")
    for n in stale:
        print(f"warning: {args.out / n} is not produced by this script", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
