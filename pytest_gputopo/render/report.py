"""All formatting: the header line, the link and P2P matrices, summaries. No I/O."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.schema import to_dict
from ..core.units import counted
from .escape import terminal, terminal_lines

if TYPE_CHECKING:  # annotations only: loading the plugin does not load the model
    from ..core.model import Topology


def legend() -> str:
    """nvidia-smi's own legend, plus what this plugin adds."""
    from .smi_topo import LEGEND  # only ``gputopo show`` needs it; keep plugin start-up light

    return (
        LEGEND.rstrip("\n") + "\n  ?    = not known (the source did not say)\n"
        "P2P: OK = read and write OK, CNS = chipset not supported, GNS = GPU not supported,\n"
        "  TNS = topology not supported, DR = disabled by regkey, NS = not supported, U = unknown"
    )


def source_text(topology: Topology) -> str:
    """The source, labelled so that a recorded machine can never pass for this host (one line: a
    profile's name shown with ``escape.terminal``, as every line printed here)."""
    src = topology.source
    if src.kind == "recorded":
        return f"recorded:{terminal(src.name)} (a recorded machine, not this host)"
    if src.kind == "smi-text":
        return f"text:{terminal(src.name)} (nvidia-smi output, not this host)"
    return "NVML" if src.kind == "nvml" else terminal(src)


def _models(topology: Topology) -> str:
    names = Counter(g.name or "unknown GPU" for g in topology.gpus)
    return ", ".join(f"{n}x {name}" for name, n in names.items())


def p2p_summary(topology: Topology) -> str:
    pairs = list(topology.pairs())
    if not pairs:
        return "P2P: no pairs"
    works = Counter(ln.p2p_works for ln in pairs)
    if works[True] == len(pairs):
        return "P2P OK on " + ("the one pair" if len(pairs) == 1 else f"all {len(pairs)} pairs")
    parts = [f"{works[True]} OK"] if works[True] else []
    parts += [f"{works[False]} refused"] if works[False] else []
    parts += [f"{works[None]} unknown"] if works[None] else []
    return f"P2P {', '.join(parts)} of {counted(len(pairs), 'pair')}"


def header_line(topology: Topology) -> str:
    """The machine in one line; every string from the profile in it escaped (``escape.terminal``)."""
    if not topology.gpus:
        why = f" ({topology.problem})" if topology.problem else ""
        return terminal(f"gputopo: no GPU{why}; source {source_text(topology)}")
    parts = [_models(topology)]
    worst = topology.worst_link()
    if worst is not None:
        label = "unknown" if worst.label is None else str(worst.label)
        parts.append(f"worst link {label} ({worst.name})")
        parts.append(p2p_summary(topology))
    parts.append(f"source {source_text(topology)}")
    return terminal("gputopo: " + ", ".join(parts))


def aligned(rows: list[list[str]]) -> list[str]:
    """Rows of cells as left-aligned columns, two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def link_matrix(topology: Topology) -> list[str]:
    """GPU x GPU labels as ``nvidia-smi topo -m`` prints them, with CPU and NUMA affinity."""
    n = len(topology.gpus)
    if not n:
        return []
    rows = [[""] + [f"GPU{i}" for i in range(n)] + ["CPU Affinity", "NUMA Affinity"]]
    for g in topology.gpus:
        cells = []
        for j in range(n):
            if j == g.index:
                cells.append("X")
            else:
                label = topology.link(g.index, j).label
                cells.append("?" if label is None else str(label))
        numa = "N/A" if g.numa_node is None else str(g.numa_node)
        rows.append([f"GPU{g.index}"] + cells + [terminal(g.cpu_affinity or "N/A"), numa])
    return aligned(rows)


def p2p_matrix(topology: Topology) -> list[str]:
    """GPU x GPU P2P status (read/write as NVML reports; ``+cuda``/``-cuda`` where CUDA disagrees)."""
    n = len(topology.gpus)
    if n < 2:
        return []
    rows = [[""] + [f"GPU{i}" for i in range(n)]]
    for a in range(n):
        cells = []
        for b in range(n):
            if a == b:
                cells.append("X")
                continue
            ln = topology.link(a, b)
            r, w = ln.p2p.read.value, ln.p2p.write.value
            cell = r if r == w else f"{r}/{w}"
            cells.append(cell)
        rows.append([f"GPU{a}"] + cells)
    return aligned(rows)


def p2p_lines(topology: Topology) -> list[str]:
    """``p2p_matrix`` under a line naming where its statuses come from; where no pair has one, that
    one line says so instead of a matrix of U. Nothing for fewer than two GPUs."""
    matrix = p2p_matrix(topology)
    if not matrix:
        return []
    kind = topology.source.kind
    if all(ln.p2p.read.value == "U" and ln.p2p.write.value == "U" for ln in topology.pairs()):
        why = {"nvml": "NVML gave none", "smi-text": "nvidia-smi topo -m text does not give it"}.get(
            kind, "the profile records none"
        )
        return ["", f"P2P read/write status: unknown for every pair ({why})"]
    source = "NVML" if kind == "nvml" else "as the profile records them; U where no source gave one"
    return ["", f"P2P read/write status ({source}):"] + matrix


def gpu_lines(topology: Topology) -> list[str]:
    """One line per GPU (the facts ``requires_gpus`` judges among them), then the versions
    ``requires_versions`` judges; ``?`` where the source did not say."""
    from ..core.hardware import GB, architecture  # load budget: a run's header loads the GPU tables only at -v

    lines = []
    for g in topology.gpus:
        pcie = "PCIe unknown"
        if g.pcie_gen_current is not None or g.pcie_width_current is not None:
            pcie = (
                f"PCIe Gen{g.pcie_gen_current or '?'} x{g.pcie_width_current or '?'}"
                f" (max Gen{g.pcie_gen_max or '?'} x{g.pcie_width_max or '?'})"
            )
        memory = "?" if g.memory_total_bytes is None else f"{g.memory_total_bytes / GB:.1f}"
        arch = architecture(g.compute_capability)
        compute = f"compute {g.compute_capability or '?'}" + (f" ({arch.title()})" if arch else "")
        nvl = f", {g.active_nvlinks}/{len(g.nvlinks)} NVLinks up" if g.nvlinks else ""
        multicast = "" if g.multicast is None else f", multicast {'yes' if g.multicast else 'no'}"
        lines.append(
            f"GPU{g.index}: {g.name or 'unknown'} bus {g.pci_bus_id or '?'} {memory} GB, {compute}, "
            f"{pcie}{nvl}{multicast}"
        )
    versions = [
        ("driver", topology.driver_version),
        ("CUDA (driver)", topology.cuda_driver_version),
        ("CUDA runtime (torch)", topology.cuda_runtime_version),
        ("NCCL (torch)", topology.nccl_version),
    ]
    return lines + ["versions: " + ", ".join(f"{what} {have or '?'}" for what, have in versions)]


def full_report(topology: Topology) -> list[str]:
    """Everything ``gputopo show`` and ``pytest -v`` print."""
    lines = [header_line(topology)]
    if topology.gpus:
        lines += [""] + link_matrix(topology)
        lines += p2p_lines(topology)
        lines += [""] + gpu_lines(topology)
    if topology.nics:
        lines += ["NICs: " + ", ".join(topology.nics)]
    lines += [f"warning: {w}" for w in topology.warnings]
    return terminal_lines(lines)


def skip_summary(counts: Counter, strict: Counter, topologies: list) -> str | None:
    """One line counting tests skipped (or failed, strict) per unmet requirement."""
    if not counts and not strict:
        return None
    parts = [f"{req} x{n}" for req, n in sorted(counts.items())]
    parts += [f"{req} x{n} (strict: failed)" for req, n in sorted(strict.items())]
    total = sum(counts.values()) + sum(strict.values())
    sources = "; ".join(dict.fromkeys(source_text(t) for t in topologies))
    return terminal(f"gputopo: {counted(total, 'test')} not run for unmet requirements: {', '.join(parts)} [{sources}]")


def recorded_summary(counts: Counter, topologies: list) -> str | None:
    """One line counting tests that passed on figures recorded for the machine, per requirement."""
    if not counts:
        return None
    parts = ", ".join(f"{req} x{n}" for req, n in sorted(counts.items()))
    sources = "; ".join(dict.fromkeys(source_text(t) for t in topologies))
    return terminal(
        f"gputopo: {counted(sum(counts.values()), 'test')} passed on figures recorded for the machine, "
        f"not measured here: {parts} [{sources}]"
    )


def json_document(
    topology: Topology, measurements: list, checks: list, own: Sequence = (), lost: Sequence = ()
) -> dict:
    """What ``--gputopo-json`` writes. Every measurement (an entry of the run's record, its verdict
    in it) keeps its origin: ``measured`` here, ``cached`` (measured here earlier), or ``recorded``
    (published for a recorded machine); ``lost`` names the results another process left that could
    not be read back."""
    return {
        **machine_document(topology),
        "measurements": list(measurements),
        "lost_measurements": list(lost),
        "test_measurements": list(own),
        "checks": checks,
    }


def machine_document(topology: Topology) -> dict:
    """What every JSON document of gputopo starts with: the machine and where its facts came from."""
    return {"schema": 1, "source": source_text(topology), "recorded": topology.recorded, "topology": to_dict(topology)}


def rank_lines(views: list) -> list[str]:
    """One header line per node (and per distinct machine seen there) of a distributed run,
    flagging any unlike rank 0's."""
    groups: dict = {}
    for view in views:
        machine = json.dumps(to_dict(view.topology), sort_keys=True)
        groups.setdefault((view.hostname, view.node_rank, machine), []).append(view)
    first = next(iter(groups))[2] if groups else None
    lines = []
    for (host, node, machine), members in groups.items():
        node_text = f" node {node}" if node is not None else ""
        differs = "" if machine == first else " [DIFFERS from rank 0's]"
        body = header_line(members[0].topology).removeprefix("gputopo: ")
        ranks = ",".join(str(v.rank) for v in members)
        lines.append(f"gputopo {host or '?'}{node_text} (rank {ranks}): {body}{differs}")
        fallbacks = dict.fromkeys(v.fallback for v in members if v.fallback)
        lines += [f"  {f.removeprefix('gputopo ')}" for f in fallbacks]
    return terminal_lines(lines)
