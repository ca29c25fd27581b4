"""Which transport NCCL should use between every GPU pair (what NCCL did against it, and each silent
fallback named, is ``nccl.fallbacks``).

NCCL picks P2P, SHM or the network for a pair of GPUs on one host from the topology it detects, its
``NCCL_*`` settings (environment first, then ``NCCL_CONF_FILE`` or ``~/.nccl.conf``, then
``/etc/nccl.conf``) and NVML's P2P status. A pair that *could* talk over NVLink or a PCIe switch but
ends up on SHM is the silent degradation users meet most (one stray ``NCCL_P2P_LEVEL=LOC`` in a
config file, a BIOS that turned P2P off). This module reproduces NCCL's decision
(``src/graph/paths.cc``: ``ncclGetLevel``, ``ncclTopoCheckP2p``; ``src/misc/param.cc``: the config
files) so that what NCCL really did
(from its log) can be compared with what the machine deserves, and every visible cause named.

Pure: the standard library and the core only. NCCL's settings come from ``nccl.nccl_settings`` (the
caller passes the environment mapping and the config files' text); nothing here reads
``os.environ`` or a file.

Mapping ``nvidia-smi`` link classes to NCCL path types (``PATH_*``), and why:

- ``NV#`` -> ``NVL``: a direct NVLink, or NVLink through NVSwitches (NCCL types GPU-NVS-GPU as NVL).
- a pair without NVLink but with a GPU NVLinked to both -> ``NVB`` (NCCL >= 2.8 routes through one
  intermediate GPU unless ``NCCL_NVB_DISABLE``; its breadth-first search reaches the pair in two
  hops, before any PCIe path through a bridge or the CPU). Only GPUs in the topology given count:
  NCCL only knows the GPUs of the communicator, so pass the topology as the job sees it.
- ``PIX`` -> ``PIX`` and ``PXB`` -> ``PXB`` (NCCL's PCI switch nodes; NCCL may flatten a two-level
  Broadcom switch, so a ``PXB`` pair can be NCCL's ``PIX``; both are within the default level).
- ``PHB`` -> ``PHB`` **and** ``NODE`` -> ``PHB``: NCCL has no ``NODE`` type. Its topology has one CPU
  node per NUMA domain with every root port of that domain attached to it, and a GPU-to-GPU path
  through a CPU node is typed ``PATH_PHB`` ("Consider a path going through the CPU as PATH_PHB",
  ``ncclTopoSetPaths``), whether it crosses one host bridge or several.
- ``SYS`` -> ``SYS``: the path crosses the link between two CPU nodes (``LINK_SYS``).

Not modelled: NCCL choosing the network for a pair because it judges the NICs faster than the
GPU-to-GPU path (``ncclTopoCheckNet``, off with ``NCCL_NET_DISABLE_INTRA=1``), containers that do not
share ``/dev/shm``, ``NCCL_TOPO_FILE``, and multi-node NVLink.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.model import Link, LinkClass, P2PStatus, Topology
from .nccl_settings import PATH_TYPES, NcclSettings

__all__ = [
    "Expectation",
    "default_p2p_level",
    "link_path",
    "expected_transports",
]

PATH_ORDER = {name: i for i, name in enumerate(PATH_TYPES)}
_CLASS_TO_PATH = {
    LinkClass.NV: "NVL",
    LinkClass.PIX: "PIX",
    LinkClass.PXB: "PXB",
    LinkClass.PHB: "PHB",
    LinkClass.NODE: "PHB",
    LinkClass.SYS: "SYS",
}
NVLINK_PATHS = ("NVL", "NVB")

P2P, SHM, NET, FAIL, UNKNOWN = "P2P", "SHM", "NET", "FAIL", "unknown"


# ---------------------------------------------------------------------------------- expectations


def _is_amd(cpu_vendor: str | None) -> bool:
    return (cpu_vendor or "").strip().lower() in ("authenticamd", "amd")


def default_p2p_level(topology: Topology, cpu_vendor: str | None = None) -> str:
    """NCCL's default P2P level: ``PXB``, raised to ``SYS`` on an x86 AMD CPU (``cpu_vendor``
    ``"AuthenticAMD"``, the cpuid / ``/proc/cpuinfo`` string; ``"AMD"`` is accepted too) when the
    communicator has 2 GPUs or fewer on the host. ``topology`` must hold only those GPUs."""
    return "SYS" if _is_amd(cpu_vendor) and len(topology.gpus) <= 2 else "PXB"


def _nvlinked(link: Link) -> bool:
    return bool(link.nvlinks)


def link_path(topology: Topology, a: int, b: int, nvb_disable: bool = False) -> tuple[str | None, int | None]:
    """NCCL's path type between ``cuda:a`` and ``cuda:b`` and, for ``NVB``, the intermediate GPU.
    (None, None) when the link is unknown."""
    link = topology.link(a, b)
    if link.nvlinks:
        return "NVL", None
    pcie = _CLASS_TO_PATH.get(link.pcie) if link.pcie is not None else None
    # NVB: two NVLink hops reach the pair before any PCIe path of three hops or more (PXB and beyond).
    # Against PIX (two hops too) NCCL keeps the wider path; we keep PIX, the conservative answer.
    if not nvb_disable and pcie != "PIX":
        best = None
        for gpu in topology.gpus:
            c = gpu.index
            if c in (a, b):
                continue
            ac, cb = topology.link(a, c), topology.link(c, b)
            if _nvlinked(ac) and _nvlinked(cb):
                key = (min(ac.nvlinks, cb.nvlinks), -c)  # type: ignore[type-var]  # _nvlinked: counted
                best = max(best, key) if best else key
        if best is not None:
            return "NVB", -best[1]
    return pcie, None


@dataclass(frozen=True)
class Expectation:
    """What NCCL should do between ``cuda:a`` and ``cuda:b`` (``a < b``).

    ``transport``: ``"P2P"``, ``"SHM"``, ``"NET"`` (SHM disabled too), ``"FAIL"`` (NVML refuses P2P
    between NVLink-connected GPUs: NCCL WARNs and the communicator fails unless
    ``NCCL_IGNORE_DISABLED_P2P`` is set) or ``"unknown"`` (the link is unknown). ``via``: ``"NVLink"``
    or ``"PCIe"`` (SHM and NET cross PCIe to host memory or the NIC). ``baseline``: what NCCL's
    defaults give this link on a healthy machine (no settings, NVML and CUDA allowing P2P) — the
    yardstick for a fallback. ``p2p_refusals``: what, beyond the settings, keeps P2P off (NVML's
    status, CUDA's answer), listed even where the level stops NCCL before it asks. ``message``: the
    line NCCL logs about this pair, if any (GPU numbers in it are NVML indices, as NCCL prints them).
    """

    a: int
    b: int
    transport: str
    via: str
    reason: str
    path: str | None = None
    label: str = "?"
    level: str | None = None
    baseline: str = UNKNOWN
    p2p_refusals: tuple[str, ...] = ()
    intermediate: int | None = None
    message: str | None = None

    @property
    def degraded(self) -> bool:
        """The settings, NVML or CUDA keep this pair from the P2P its link deserves."""
        return self.baseline == P2P and self.transport != P2P


def _nvml_refusal(link: Link) -> str | None:
    """``"read/write chipset not supported (CNS)"`` when NVML refuses read or write; None when both
    are OK or unknown (a source that did not say is not a refusal)."""
    bad = {
        cap: getattr(link.p2p, cap)
        for cap in ("read", "write")
        if getattr(link.p2p, cap) not in (P2PStatus.OK, P2PStatus.UNKNOWN)
    }
    if not bad:
        return None
    if len(bad) == 2 and bad["read"] is bad["write"]:
        return f"read/write {bad['read'].description} ({bad['read'].value})"
    return ", ".join(f"{cap} {status.description} ({status.value})" for cap, status in bad.items())


def _nvml_unknown(link: Link) -> bool:
    return P2PStatus.UNKNOWN in (link.p2p.read, link.p2p.write)


def _bus_hex(bus_id: str | None) -> str | None:
    """NCCL's ``%lx`` of a PCI bus id (``busIdToInt64``): ``00000000:19:00.0`` -> ``19000``."""
    if not bus_id:
        return None
    digits = re.sub(r"[^0-9a-fA-F]", "", bus_id)
    return f"{int(digits, 16):x}" if digits else None


def _nvml_index(topology: Topology, i: int) -> int:
    nvml = topology.gpus[i].nvml_index
    return i if nvml is None else nvml


def _label_path(label: str, path: str) -> str:
    """``"SYS"``, ``"NV12"``, but ``"NODE (NCCL path PHB)"`` where the names differ."""
    plain = label.startswith("NV") and path == "NVL" or label == path
    return label if plain else f"{label} (NCCL path {path})"


def expected_transports(
    topology: Topology, settings: NcclSettings | None = None, cpu_vendor: str | None = None, gpus: int | None = None
) -> list[Expectation]:
    """One :class:`Expectation` per GPU pair among ``cuda:0 .. cuda:gpus-1`` (all when None).
    ``topology`` is the machine as the job sees it (CUDA numbering); the communicator is assumed to
    use exactly these GPUs, which matters for the AMD default level and for NVB routing."""
    settings = settings or NcclSettings()
    if gpus is not None:
        topology = topology.restrict(range(min(gpus, len(topology.gpus))))
    default = default_p2p_level(topology, cpu_vendor)
    level = settings.p2p_level or default
    out = []
    for link in topology.pairs():
        out.append(_expect(topology, link, settings, default, level, cpu_vendor))
    return out


def _expect(
    topology: Topology, link: Link, settings: NcclSettings, default: str, level: str, cpu_vendor: str | None
) -> Expectation:
    """NCCL's decision for one pair, in NCCL's order: the P2P level, NVML's P2P status, CUDA's peer
    access, then P2P; the first step that turns P2P off gives the outcome."""
    a, b = link.a, link.b
    label = str(link.label) if link.label is not None else "?"
    path, inter = link_path(topology, a, b, settings.nvb_disable)
    if path is None:
        return Expectation(
            a, b, UNKNOWN, UNKNOWN, f"{label}: the link between GPU{a} and GPU{b} is unknown", label=label, level=level
        )
    pair = _Pair(topology, settings, link, default, level, cpu_vendor, label, path, inter)
    return _beyond_level(pair) or _refused_by_nvml(pair) or _refused_by_cuda(pair) or _p2p(pair)


@dataclass(frozen=True)
class _Pair:
    """One GPU pair as the steps of NCCL's decision read it."""

    topology: Topology
    settings: NcclSettings
    link: Link
    default: str
    level: str
    cpu_vendor: str | None
    label: str
    path: str
    inter: int | None  # the intermediate GPU of an NVB path

    @property
    def shown(self) -> str:
        if self.path == "NVB":
            return f"{self.label}, NVLink through GPU{self.inter} (NCCL path NVB)"
        return _label_path(self.label, self.path)

    @property
    def hops(self) -> list[tuple[int, int]]:
        a, b, inter = self.link.a, self.link.b, self.inter
        return [(a, inter), (inter, b)] if inter is not None else [(a, b)]

    @property
    def refusals(self) -> list[str]:
        """What, beyond the settings, keeps P2P off: NVML's status on each hop, CUDA's answer."""
        refusals = []
        for x, y in self.hops:
            refusal = _nvml_refusal(self.topology.link(x, y))
            if refusal:
                where = f" between GPU{min(x, y)} and GPU{max(x, y)}" if self.inter is not None else ""
                refusals.append(f"NVML P2P {refusal}{where}")
        if self.inter is None and self.link.cuda_peer is False:
            refusals.append("CUDA reports no peer access (cudaDeviceCanAccessPeer)")
        return refusals

    @property
    def off(self) -> str:
        """The transport NCCL takes where P2P is off."""
        return NET if self.settings.shm_disable else SHM

    @property
    def off_text(self) -> str:
        return f"{self.off} ({self.settings.describe('NCCL_SHM_DISABLE')})" if self.settings.shm_disable else self.off

    def outcome(self, **fields) -> Expectation:
        baseline = P2P if PATH_ORDER[self.path] <= PATH_ORDER[self.default] else SHM
        return Expectation(
            a=self.link.a,
            b=self.link.b,
            path=self.path,
            label=self.label,
            level=self.level,
            baseline=baseline,
            p2p_refusals=tuple(self.refusals),
            intermediate=self.inter,
            **fields,
        )


def _beyond_level(pair: _Pair) -> Expectation | None:
    """1. The level: P2P only for path <= level (NCCL_P2P_DISABLE=1 is level LOC)."""
    settings = pair.settings
    if PATH_ORDER[pair.path] <= PATH_ORDER[pair.level]:
        return None
    if settings.p2p_disable:
        why = f"{settings.describe('NCCL_P2P_DISABLE')}: P2P off"
    elif settings.p2p_level is not None:
        why = f"{settings.level_origin()}: {pair.shown} is beyond it, P2P off"
    else:
        why = f"{pair.shown} is beyond NCCL's default P2P level {pair.default}"
        if pair.cpu_vendor is None and len(pair.topology.gpus) <= 2:
            why += " (SYS on an AMD CPU with 2 GPUs or fewer; the CPU vendor was not given)"
    if pair.refusals:
        why += f" (also: {'; '.join(pair.refusals)})"
    return pair.outcome(transport=pair.off, via="PCIe", reason=f"{why}: {pair.off_text}")


def _refused_by_nvml(pair: _Pair) -> Expectation | None:
    """2. NVML: read and write must be OK on every hop (unless NCCL_IGNORE_DISABLED_P2P=2)."""
    settings, topology, path = pair.settings, pair.topology, pair.path
    nvml_refused = [r for r in pair.refusals if r.startswith("NVML")]
    if not nvml_refused or settings.ignore_disabled_p2p == 2:
        return None
    hops = pair.hops
    n1, n2 = _nvml_index(topology, hops[0][0]), _nvml_index(topology, hops[0][1])
    for x, y in hops:  # the first refusing hop is the one NCCL names
        if _nvml_refusal(topology.link(x, y)):
            n1, n2 = _nvml_index(topology, x), _nvml_index(topology, y)
            break
    what = "; ".join(nvml_refused)
    message: str | None
    if path in NVLINK_PATHS and settings.ignore_disabled_p2p == 0:
        message = (
            f"P2P is disabled between NVLINK connected GPUs {n1} and {n2}. This should not be the "
            f"case given their connectivity, and is probably due to a hardware issue. If you still "
            f"want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1."
        )
        return pair.outcome(
            transport=FAIL,
            via="NVLink",
            message=message,
            reason=(
                f"{what} between NVLink-connected GPUs ({pair.label}): NCCL WARNs and the communicator fails "
                f"(with NCCL_IGNORE_DISABLED_P2P=1 it uses {pair.off})"
            ),
        )
    message = None
    if PATH_ORDER[path] < PATH_ORDER["SYS"] and settings.ignore_disabled_p2p == 0:
        message = (
            f"P2P is disabled between connected GPUs {n1} and {n2}. You can repress this message "
            f"with NCCL_IGNORE_DISABLED_P2P=1."
        )
    reason = f"{what.replace('NVML P2P', 'NVML reports P2P', 1)}: NCCL turns P2P off"
    if settings.ignore_disabled_p2p == 1 and path in NVLINK_PATHS:
        reason += f" ({settings.describe('NCCL_IGNORE_DISABLED_P2P')} silences its WARN)"
    return pair.outcome(transport=pair.off, via="PCIe", message=message, reason=f"{reason}: {pair.off_text}")


def _refused_by_cuda(pair: _Pair) -> Expectation | None:
    """3. CUDA itself (p2pCanConnect; not asked for a pair routed through an intermediate GPU)."""
    if pair.inter is not None or pair.link.cuda_peer is not False:
        return None
    a, b = pair.link.a, pair.link.b
    bus_a, bus_b = _bus_hex(pair.topology.gpus[a].pci_bus_id), _bus_hex(pair.topology.gpus[b].pci_bus_id)
    message = f"Could not enable P2P between dev {a}(={bus_a}) and dev {b}(={bus_b})" if bus_a and bus_b else None
    return pair.outcome(
        transport=pair.off,
        via="PCIe",
        message=message,
        reason=(f"CUDA reports no peer access between cuda:{a} and cuda:{b}: NCCL turns P2P off: {pair.off_text}"),
    )


def _p2p(pair: _Pair) -> Expectation:
    """4. P2P -- if NVML allows it: an unknown status (a text machine without `topo -p2p`) leaves the
    transport unknown, as requires_p2p leaves such a pair unmet."""
    settings, path, shown = pair.settings, pair.path, pair.shown
    unsure = ""
    if settings.ignore_disabled_p2p == 2:
        unsure = f" ({settings.describe('NCCL_IGNORE_DISABLED_P2P')}: NVML not asked)"
    elif any(_nvml_unknown(pair.topology.link(x, y)) for x, y in pair.hops):
        return pair.outcome(
            transport=UNKNOWN,
            via=UNKNOWN,
            reason=(f"{shown}: NCCL takes P2P here only if NVML allows it, and the P2P status is unknown"),
        )
    if path == "NVL":
        reason = f"{pair.label}: NCCL uses P2P over NVLink"
    elif path == "NVB":
        reason = f"{shown}: NCCL uses P2P over NVLink via GPU{pair.inter}"
    else:
        whose = (
            f"the P2P level {pair.level} set by {settings.level_origin()}"
            if settings.p2p_level is not None
            else f"NCCL's default P2P level {pair.default}"
        )
        reason = f"{shown} is within {whose}: NCCL uses P2P over PCIe"
    return pair.outcome(transport=P2P, via="NVLink" if path in NVLINK_PATHS else "PCIe", reason=reason + unsure)
