"""``nvidia-smi`` text as a machine: the ``topo -m`` matrix (``parse.smi_topo``) and the ``topo -p2p``
matrices read here, together as a ``model.Topology`` labelled as text (never this host)."""

from __future__ import annotations

import re

from ..core import model
from .smi_table import GPU_RE, P2P_VALUES, UNKNOWN, SmiParseError, read_table, require_gpu_rows
from .smi_topo import SmiTopo
from .which_tool import refusal

Matrix = tuple[tuple[str, ...], ...]  # a topo -p2p matrix: GPU x GPU status abbreviations


def parse_p2p_matrix(text: str) -> Matrix:
    """One ``nvidia-smi topo -p2p <r|w|n|a>`` matrix: GPU x GPU status abbreviations ("OK",
    "GNS", ...), "X" on the diagonal, "U" where a cell is missing or unreadable.

    nvidia-smi writes one row per GPU, ``X`` on the diagonal and only there. Text that breaks those
    rules is refused naming its line, never read: a second row for a GPU (which holds its status is
    unknown), a row with ``X`` off its diagonal or a status on it (its cells are not in their columns:
    a lost tab, or another tool's matrix, as rocm-smi's ``0`` on the diagonal). Another tool's text is
    refused naming the tool (``parse.which_tool``)."""
    if why := refusal(text, "smi-p2p"):
        raise SmiParseError(why)
    table = read_table(text)
    gpus = [d for d in table.devices if GPU_RE.fullmatch(d)]
    require_gpu_rows(table, gpus, "P2P")
    for label, line, first in table.duplicates:
        if label in gpus:
            raise SmiParseError(
                f"line {line}: a second row for {label} (the first is line {first}): nvidia-smi "
                f"topo -p2p writes one row per GPU, so which gives its status is unknown"
            )
    col = {d: j for j, d in enumerate(table.devices)}

    def raw_cell(a: str, b: str) -> str:
        fields = table.rows.get(a, ([], True))[0]
        return fields[col[b]].upper() if col[b] < len(fields) else ""

    for a in gpus:
        if a not in table.rows:
            continue
        for b in gpus:
            raw, where = raw_cell(a, b), f"line {table.row_lines[a]}: {a}'s cell in column {b}"
            if a == b and raw not in ("", "X"):
                raise SmiParseError(
                    f"{where} (its own) is {raw[:20]!r}, where nvidia-smi topo -p2p prints X: "
                    f"the row's cells are not in their columns, or this is another tool's matrix"
                )
            if a != b and raw == "X":
                raise SmiParseError(
                    f"{where} is X, which nvidia-smi topo -p2p prints only on the diagonal: "
                    f"the row's cells are not in their columns"
                )
    if len(gpus) == 1 and raw_cell(gpus[0], gpus[0]) != "X":
        raise SmiParseError(
            f"line {table.row_lines[gpus[0]]}: no nvidia-smi P2P matrix: {gpus[0]}'s row has no X in its own column"
        )

    def cell(a: str, b: str) -> str | None:
        raw = raw_cell(a, b)
        return raw if raw in P2P_VALUES else None

    read = {(a, b): cell(a, b) for a in gpus for b in gpus if a != b}
    if read and not any(read.values()):
        # Likely the wrong text (a topo -m matrix), not a P2P matrix whose cells are all unknown.
        raise SmiParseError("no P2P status cell in the matrix (expected OK, CNS, GNS, TNS, NS, DR or U)")
    return tuple(tuple("X" if a == b else read[a, b] or "U" for b in gpus) for a in gpus)


# ---------------------------------------------------------------------------------------------
# To the model and back


def _link(a: int, b: int, text: str) -> model.Link:
    if text == UNKNOWN:
        return model.Link(a, b, pcie=None, nvlinks=None)
    label = model.LinkLabel.parse(text)
    if label.cls is model.LinkClass.NV:
        return model.Link(a, b, pcie=None, nvlinks=label.nvlinks)  # the PCIe path is hidden behind NV#
    return model.Link(a, b, pcie=label.cls, nvlinks=0)


def _worse_label(x: str, y: str) -> str:
    if UNKNOWN in (x, y):
        return UNKNOWN if x == y else (y if x == UNKNOWN else x)
    return min(x, y, key=model.LinkLabel.parse)


_P2P_RANK = {model.P2PStatus.OK: 2, model.P2PStatus.UNKNOWN: 1}  # any refusal ranks 0


def _p2p_status(matrix: Matrix, a: int, b: int, warnings: list[str], cap: str) -> model.P2PStatus:
    """The pair's status: the worse direction (a refusal, then unknown, then OK)."""
    statuses = []
    for i, j in ((a, b), (b, a)):
        try:
            statuses.append(model.P2PStatus(matrix[i][j]))
        except (IndexError, ValueError, TypeError):
            statuses.append(model.P2PStatus.UNKNOWN)
    if all(s is model.P2PStatus.UNKNOWN for s in statuses) and max(a, b) >= len(matrix):
        warnings.append(f"P2P {cap} matrix has no GPU{max(a, b)}")
    return min(statuses, key=lambda s: _P2P_RANK.get(s, 0))


def to_topology(smi: SmiTopo, p2p: dict[str, Matrix] | None = None, name: str | None = None) -> model.Topology:
    """The model of what the text says; everything it does not say is None (unknown)."""
    p2p = p2p or {}
    bad = set(p2p) - set(model.P2P_CAPS)
    if bad:
        raise ValueError(f"unknown P2P capability {sorted(bad)[0]!r} (expected one of {model.P2P_CAPS})")
    warnings = list(smi.warnings)
    # nvidia-smi numbers GPUs by their NVML index: GPU<i> of the text is NVML index i.
    gpus = tuple(
        model.Gpu(
            index=i,
            nvml_index=i,
            cpu_affinity=g.cpu_affinity,
            numa_node=int(g.numa_affinity) if g.numa_affinity and re.fullmatch(r"[0-9]+", g.numa_affinity) else None,
        )
        for i, g in enumerate(smi.gpus)
    )
    links = []
    for a in range(len(gpus)):
        for b in range(a + 1, len(gpus)):
            link = _link(a, b, _worse_label(smi.matrix[a][b], smi.matrix[b][a]))
            status = {cap: _p2p_status(m, a, b, warnings, cap) for cap, m in p2p.items()}
            links.append(model.Link(a, b, link.pcie, link.nvlinks, model.P2P(**status)))
    return model.Topology(
        gpus=gpus,
        links=tuple(links),
        source=model.Source("smi-text", name),
        nics=smi.nics,
        warnings=tuple(dict.fromkeys(warnings)),
    )
