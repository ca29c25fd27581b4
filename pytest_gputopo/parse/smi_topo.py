"""Read the text of ``nvidia-smi topo -m``: each GPU pair's link, each GPU's affinities, the NICs by
their legend (``render.smi_topo`` writes it; its grid, shared with ``topo -p2p``, is ``parse.smi_table``'s).

Real outputs come tab-separated (cells padded like ``"\\t X \\t"``, empty trailing cells) or
space-aligned (tabs expanded by a paste), sometimes cut short or with a mangled header. The header
says which columns exist; the rows give the cells. Whatever can be read is returned, what could not
is a warning; text with no GPU matrix at all is an ``SmiParseError``, and nothing else is raised.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..core.units import counted
from .smi_nic_legend import nic_legend
from .smi_table import (
    GPU_RE,
    SPACES,
    STOPS,
    TABS,
    UNKNOWN,
    SmiParseError,
    Table,
    is_cell,
    link_label,
    read_table,
    require_gpu_rows,
)
from .which_tool import refusal


@dataclass(frozen=True)
class SmiGpu:
    name: str
    cpu_affinity: str | None = None
    numa_affinity: str | None = None
    gpu_numa_id: str | None = None


@dataclass(frozen=True)
class SmiTopo:
    gpus: tuple[SmiGpu, ...] = ()
    nics: tuple[str, ...] = ()
    matrix: tuple[tuple[str, ...], ...] = ()  # GPU x GPU: "X", "NV12", "SYS" (SOC read as SYS), "?"
    gpu_nic: tuple[tuple[str, ...], ...] = ()  # GPU x NIC, same labels
    columns: tuple[str, ...] = ()  # trailing columns the header names
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": [
                {
                    "name": g.name,
                    "cpu_affinity": g.cpu_affinity,
                    "numa_affinity": g.numa_affinity,
                    "gpu_numa_id": g.gpu_numa_id,
                }
                for g in self.gpus
            ],
            "nics": list(self.nics),
            "matrix": [list(r) for r in self.matrix],
            "gpu_nic": [list(r) for r in self.gpu_nic],
            "warnings": list(self.warnings),
        }


# ---------------------------------------------------------------------------------------------
# topo -m


_CELL_NAMES = ("X", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC")
_AFFINITY_RE = re.compile(r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*|N/A")


def _unfused(field: str, room: int) -> list[tuple[list[str], str | None]] | None:
    """Every way ``field`` reads as 2 to ``room`` cells run together (``NODENODE``), the last
    possibly followed by the value after the matrix (``SYS0-23``) when they fill the row; None
    for a field too long to be a few cells and a CPU list, which is not read."""
    if len(field) > 512:
        return None
    out: list[tuple[list[str], str | None]] = []

    def walk(rest: str, cells: list[str]) -> None:
        if len(cells) == room or not rest:
            if len(cells) > 1 - bool(rest) and (not rest or _AFFINITY_RE.fullmatch(rest)):
                out.append((cells, rest or None))
            return
        heads = [name for name in _CELL_NAMES if rest.upper().startswith(name)]
        digits = re.match(r"NV([0-9]+)", rest.upper())
        heads += [rest[: 2 + k] for k in range(1, len(digits.group(1)) + 1)] if digits else []
        for head in heads:
            if head.upper() == "X" or link_label(head):
                walk(rest[len(head) :], cells + [head])

    walk(field, [])
    return out


def _row_cells(
    d: str, fields: list[str], devices: list[str], warnings: list[str]
) -> tuple[list[str], list[str] | None]:
    """The row's matrix cells in column order, and the fields after them (None when they cannot be
    placed). Past about 32 NICs nvidia-smi runs cells together ("NODENODE", an affinity fused to
    the last cell): such a field is split when it reads one way only. Otherwise every cell after
    it is left unknown, with a warning: a cell read one column off would be a wrong fact."""
    n = len(devices)
    row: list[str] = []
    for i, raw in enumerate(fields):
        if len(row) == n:
            return row, fields[i:]
        if not raw or is_cell(raw):
            row.append(raw)
            continue
        ways = _unfused(raw, n - len(row))
        if ways is not None and len(ways) == 1:
            cells, after = ways[0]
            row += cells
            if after is not None:
                return row, [after] + fields[i + 1 :]
            continue
        if ways == []:  # one unreadable cell; its neighbours keep their places
            row.append(raw)
            continue
        warnings.append(
            f"{d}: cell {raw[:40]!r} reads as cells run together in "
            f"{'many' if ways is None else len(ways)} ways; it and the cells after it are unknown"
        )
        return row, None
    return row, []


def _width(fields: list[str], layout: str) -> int:
    """How many fields a row has after its matrix cells: all of them in TABS, up to the last value
    in STOPS (whose empty fields at the end of a line left no trace)."""
    if layout == STOPS:
        while fields and not fields[-1]:
            fields = fields[:-1]
    return len(fields)


def _lost_a_tab(fields: list[str], layout: str, widths: dict[str, list[int]], columns: tuple[str, ...]) -> bool:
    """Whether a GPU row lost a tab next to an empty value (a blank CPU Affinity run into its
    neighbour), which moves every value after it one column left. nvidia-smi writes a field per
    header column after the matrix, and an empty one before GPU NUMA ID: in TABS a row with fewer
    (or fewer than most rows) lost one. In STOPS the empty fields at the end of a line are gone
    too, so a row with values that ends short is as likely shifted as blank at its end. In SPACES
    every empty value is gone: a row with values, fewer than the header's columns, cannot place them."""
    if layout == SPACES:
        return 0 < len(fields) < len(columns)
    full = len(columns) + ("GPU NUMA ID" in columns)
    width = _width(fields, layout)
    if layout == TABS:
        usual = Counter(widths[TABS]).most_common(1)[0][0] if widths[TABS] else 0
        return width < max(full, usual)
    return 0 < width < max([full] + widths[STOPS])


def _trailing(
    label: str, fields: list[str], layout: str, columns: tuple[str, ...], warnings: list[str]
) -> dict[str, str | None]:
    """Map the fields after the matrix cells onto the header's trailing columns. nvidia-smi
    writes an extra empty field before GPU NUMA ID, so that column takes the last value."""
    if layout == SPACES and fields and len(fields) != len(columns):
        # Space-aligned text drops empty cells, so which value belongs where is unknowable.
        warnings.append(
            f"{label}: {counted(len(fields), 'value')} for {counted(len(columns), 'trailing column')} in "
            f"space-aligned text; they are left unknown"
        )
        return {}
    values: dict[str, str | None] = {}
    for i, col in enumerate(columns):
        if col == "GPU NUMA ID":
            present = [f for f in fields[i:] if f]
            values[col] = present[-1] if present else None
        else:
            values[col] = (fields[i] if i < len(fields) else "") or None
    return values


def parse_topo_matrix(text: str) -> SmiTopo:
    """The ``nvidia-smi topo -m`` matrix in ``text`` (other lines around it are ignored). Text that
    is no such matrix is refused, never read as GPUs with unknown links; another tool's text (rocm-smi's,
    ``-q``'s) is refused naming the tool (``parse.which_tool``)."""
    if why := refusal(text, "smi-topo"):
        raise SmiParseError(why)
    table = read_table(text)
    warnings, devices = table.warnings, table.devices
    gpu_names = [d for d in devices if GPU_RE.fullmatch(d)]
    nic_names = [d for d in devices if d not in gpu_names]
    require_gpu_rows(table, gpu_names, "topology")
    if gpu_names != [f"GPU{i}" for i in range(len(gpu_names))]:
        warnings.append(f"GPU names are not GPU0..GPU{len(gpu_names) - 1}: {' '.join(gpu_names)}")
    read = {d: _row_cells(d, table.rows[d][0], devices, warnings) for d in devices if d in table.rows}
    if len(gpu_names) == 1:
        _require_own_x(table, gpu_names[0], read)
    cells, gpus = _read_rows(table, gpu_names, read)
    if len(gpu_names) >= 2 and not any(a in gpu_names and b in gpu_names for a, b in cells):
        raise SmiParseError(
            "no nvidia-smi topology matrix: not one GPU pair's cell is a link nvidia-smi "
            "prints (NV#, PIX, PXB, PHB, NODE, SYS)"
        )
    col = {d: j for j, d in enumerate(devices)}
    matrix = tuple(tuple(_pair_cell(cells, col, a, b, warnings) for b in gpu_names) for a in gpu_names)
    gpu_nic = tuple(tuple(_pair_cell(cells, col, a, b, warnings) for b in nic_names) for a in gpu_names)
    legend = nic_legend(table.rest, nic_names, warnings)
    unnamed = [d for d in nic_names if re.fullmatch(r"NIC[0-9]+", d) and d not in legend]
    if unnamed:
        warnings.append(f"no NIC Legend entry for {', '.join(unnamed)}; the row label is used as its name")
    return SmiTopo(
        gpus=tuple(gpus),
        nics=tuple(legend.get(d, d) for d in nic_names),
        matrix=matrix,
        gpu_nic=gpu_nic,
        columns=table.columns,
        warnings=tuple(warnings),
    )


Cells = dict[str, tuple[list[str], list[str] | None]]  # row label -> its matrix cells and the fields after them


def _require_own_x(table: Table, only: str, read: Cells) -> None:
    """One GPU: no pair cell says this is nvidia-smi's matrix; its own cell must (rocm-smi prints 0 there)."""
    j = table.devices.index(only)
    own = read[only][0][j] if j < len(read[only][0]) else ""
    if own.upper() != "X":
        raise SmiParseError(
            f"line {table.row_lines[only]}: no nvidia-smi topology matrix: {only}'s own cell is "
            f"{own[:20]!r}, where nvidia-smi topo -m prints X"
        )


def _read_rows(table: Table, gpu_names: list[str], read: Cells) -> tuple[dict[tuple[str, str], str], list[SmiGpu]]:
    """Each row's link cells, (row, column) -> canonical label (a missing or unreadable cell stays
    absent), and each GPU with the values after its matrix cells, where they can be placed."""
    warnings, devices, n = table.warnings, table.devices, len(table.devices)
    widths = {
        layout: [
            _width(after, layout)
            for d in gpu_names
            if d in read and (after := read[d][1]) is not None and table.rows[d][1] == layout
        ]
        for layout in (TABS, STOPS)
    }
    cells: dict[tuple[str, str], str] = {}
    gpus: list[SmiGpu] = []
    for d in devices:
        if d not in table.rows:
            warnings.append(f"no row for {d}")
            if d in gpu_names:
                gpus.append(SmiGpu(d))
            continue
        layout = table.rows[d][1]
        row, trailing = read[d]
        if d in gpu_names and len(row) == n and trailing and _lost_a_tab(trailing, layout, widths, table.columns):
            row, trailing = _unplaced(d, row, table, warnings), None
        present = sum(1 for f in row if f)  # an empty cell is a missing one (a cut tab row)
        if present < n and trailing is not None:
            warnings.append(f"{d} row has {present} of {counted(n, 'cell')}")
        _read_links(d, row, devices, cells, warnings)
        if d in gpu_names:
            values = {} if trailing is None else _trailing(d, trailing, layout, table.columns, warnings)
            gpus.append(SmiGpu(d, values.get("CPU Affinity"), values.get("NUMA Affinity"), values.get("GPU NUMA ID")))
    return cells, gpus


def _unplaced(d: str, row: list[str], table: Table, warnings: list[str]) -> list[str]:
    """A GPU row whose values after the matrix cannot be placed: they are unknown, and so is its last
    cell where it may have taken the first digits of the value after it. Returns the row's cells."""
    warnings.append(
        f"{d}: its values after the matrix cannot be placed (a blank one, or a tab lost next "
        f"to one); its {', '.join(table.columns) or 'values'} are unknown"
    )
    if re.fullmatch(r"NV[0-9]{2,}", row[-1]):  # "NV1" run into a CPU list "8-15"
        warnings.append(
            f"{d}-{table.devices[-1]}: {row[-1]} may end in the first digits of the value after it; the cell is unknown"
        )
        return row[:-1] + [""]
    return row


def _read_links(
    d: str, row: list[str], devices: list[str], cells: dict[tuple[str, str], str], warnings: list[str]
) -> None:
    """Row ``d``'s cells as links into ``cells``; its diagonal must be X."""
    for other, raw in zip(devices, row, strict=False):  # a cut row is shorter: its missing cells stay absent
        if not raw:
            continue
        if other == d:
            if raw.upper() != "X":
                warnings.append(f"{d}: diagonal cell is {raw!r}, expected X")
        elif (label := link_label(raw)) is None:
            warnings.append(f"{d}-{other}: unreadable cell {raw!r}")
        else:
            cells[d, other] = label


def _pair_cell(cells: dict[tuple[str, str], str], col: dict[str, int], a: str, b: str, warnings: list[str]) -> str:
    """The pair's link: the matrix is symmetric, so a cell missing one way is read from the other."""
    if a == b:
        return "X"
    here, there = cells.get((a, b)), cells.get((b, a))
    if here and there and here != there and col[a] < col[b]:
        warnings.append(f"{a}-{b} reads {here} one way and {there} the other")
    return here or there or UNKNOWN
