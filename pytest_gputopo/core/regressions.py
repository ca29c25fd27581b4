"""``--gputopo-expect``: this node against a reference profile of a healthy node, GPU by physical GPU."""

from __future__ import annotations

from .causes import Finding
from .model import Gpu, Topology
from .requirements import link_text
from .units import counted


def pcie_trained_down(gpu: Gpu, full: int, against: str) -> str:
    """The one wording of a GPU's PCIe link running below its width, whatever it is held against
    (``--gputopo-expect``: the reference's; the check's ``pcie`` item: the GPU's own maximum), e.g.
    ``PCIe link trained down: x8 of x16 (the reference's width; Gen3 of Gen5)``. The generation is
    said, never judged: an idle GPU drops to Gen1 to save power."""
    return (
        f"PCIe link trained down: x{gpu.pcie_width_current} of x{full} ({against}; "
        f"Gen{gpu.pcie_gen_current or '?'} of Gen{gpu.pcie_gen_max or '?'})"
    )


def _physical_match(reference: Topology, gpu: Gpu) -> int | None:
    """The reference GPU that is physically ``gpu``: the same UUID, else the same PCI bus id, else
    the same NVML index (nvidia-smi's number), whatever CUDA_VISIBLE_DEVICES made of its CUDA index."""
    keys = ("uuid", "pci_bus_id", "nvml_index")
    for key in keys:
        mine = getattr(gpu, key)
        if mine is not None:
            found = [r.index for r in reference.gpus if getattr(r, key) == mine]
            if len(found) == 1:
                return found[0]
    if all(getattr(gpu, key) is None for key in keys) and gpu.index < len(reference.gpus):
        return gpu.index  # a machine that says nothing of its GPUs' identity: the index is all there is
    return None


def regressions(reference: Topology, actual: Topology, all_visible: bool = True) -> list[str]:
    """Every way ``actual`` is worse than ``reference``; empty when it is as good or better. The
    physical GPUs the job sees are compared with the same physical GPUs of the reference, and named
    as nvidia-smi numbers them. ``all_visible``: the job may see every GPU (no CUDA_VISIBLE_DEVICES),
    so fewer GPUs than the reference is itself a regression."""
    return [f.line for f in compared(reference, actual, all_visible)[1]]


def compared(reference: Topology, actual: Topology, all_visible: bool = True) -> tuple[tuple[str, ...], list[Finding]]:
    """``regressions`` as findings (``core.causes``), each naming the GPUs it is about, with the
    names of the GPUs compared GPU by GPU and pair by pair."""
    found = []

    def add(line: str, gpus: tuple[str, ...] = (), what: str = "") -> None:
        found.append(Finding(line, gpus, what or line, "-".join(gpus)))

    if all_visible and len(actual.gpus) < len(reference.gpus):
        add(f"{counted(len(actual.gpus), 'GPU')} visible, the reference has {len(reference.gpus)}")
    ref_of = {}
    for gpu in actual.gpus:
        match = _physical_match(reference, gpu)
        where = f"GPU{gpu.nvml_index if gpu.nvml_index is not None else gpu.index}"
        if match is None:
            what = "is not in the reference (no GPU with its UUID, bus id or number)"
            add(f"{where} {what}", (where,), what)
            continue
        ref_of[gpu.index] = (match, where)
        ref = reference.gpus[match]
        if gpu.active_nvlinks < ref.active_nvlinks:
            what = f"has {counted(gpu.active_nvlinks, 'active NVLink')}, the reference {ref.active_nvlinks}"
            add(f"{where} {what}", (where,), what)
        # The current generation is not compared: an idle GPU drops to Gen1 to save power. The
        # maximum (for this device and system) and the current width are what a lost link lowers.
        have, want = gpu.pcie_width_current, ref.pcie_width_current
        if want is not None and have is not None and have < want:  # worded as the check's pcie item
            what = pcie_trained_down(gpu, want, "the reference's width")
            add(f"{where} {what}", (where,), what)
        elif want is not None and have is None:
            what = f"PCIe width is unknown, the reference x{want} (current)"
            add(f"{where} {what}", (where,), what)
        for what, have, want, note in (
            ("max PCIe generation", gpu.pcie_gen_max, ref.pcie_gen_max, ""),
            ("max PCIe width", gpu.pcie_width_max, ref.pcie_width_max, ""),
        ):
            if want is not None and (have is None or have < want):
                shown = "unknown" if have is None else ("x" if "width" in what else "Gen") + str(have)
                wanted = ("x" if "width" in what else "Gen") + str(want)
                add(
                    f"{where} {what} is {shown}, the reference {wanted}{note}",
                    (where,),
                    f"{what} is {shown}, the reference {wanted}{note}",
                )
    for link in actual.pairs():
        if link.a not in ref_of or link.b not in ref_of:
            continue
        (ra, wa), (rb, wb) = ref_of[link.a], ref_of[link.b]
        ref_link = reference.link(ra, rb)
        name, pair = f"{wa}-{wb}", (wa, wb)
        if ref_link.label is not None and (link.label is None or link.label < ref_link.label):
            what = f"are linked by {link_text(link)}, the reference by {ref_link.label}"
            add(f"{name} {what}", pair, what)
        elif (ref_link.nvlinks or 0) > (link.nvlinks or 0):
            what = f"have {counted(link.nvlinks or 0, 'NVLink')}, the reference {ref_link.nvlinks}"
            add(f"{name} {what}", pair, what)
        if ref_link.p2p_works and not link.p2p_works:
            what = f"P2P {'unknown' if link.p2p_works is None else 'lost'} (the reference can do P2P)"
            add(f"{name} {what}", pair, what)
    return tuple(where for _, where in ref_of.values()), found
