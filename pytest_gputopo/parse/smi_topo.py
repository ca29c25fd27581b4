"""Read the text of ``nvidia-smi topo -m`` and ``nvidia-smi topo -p2p <r|w|n|a>`` (``render.smi_topo``
writes it).

Real outputs come tab-separated (cells padded like ``"\\t X \\t"``, empty trailing cells) or
space-aligned (tabs expanded by a paste), sometimes cut short or with a mangled header. The header
says which columns exist; the rows give the cells. Whatever can be read is returned, what could not
is a warning; text with no GPU matrix at all is an ``SmiParseError``, and nothing else is raised.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..core import model
from ..core.units import counted
from .smi_nic_legend import nic_legend
from .which_tool import refusal

TRAILING = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
# Tolerate case and lost spaces ("CPUAffinity") in a mangled header.
_COLUMN_RES = {c: re.compile(r"\s*".join(c.split()), re.IGNORECASE) for c in TRAILING}
GPU_RE = re.compile(r"GPU[0-9]+")
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC[0-9]+)\s*:\s*(\S+)\s*$")
# nvidia-smi 580 underlines the matrix's header with terminal codes (ESC[4m ... ESC[0m) even into a file
# (seen on an H200, driver 580.159.04: tests/captured/h200-driver-580); a terminal shows none of them.
_TERMINAL_CODES_RE = re.compile(r"\x1b\[[0-9;]*m")
P2P_VALUES = {s.value for s in model.P2PStatus}
UNKNOWN = "?"


class SmiParseError(ValueError):
    """The text holds no readable GPU matrix; the message is a one-line reason."""


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
# The matrix as a table: header devices, trailing columns, and one list of cells per row label


@dataclass
class _Table:
    devices: list[str]
    columns: tuple[str, ...]
    rows: dict[str, tuple[list[str], str]]  # label -> (cells, layout: TABS, STOPS or SPACES)
    rest: list[str]  # the lines after the matrix (for the NIC Legend)
    warnings: list[str]
    header_line: int | None = None  # 1-based; None where the header was lost
    row_lines: dict[str, int] = dataclasses.field(default_factory=dict)  # label -> its row's line (1-based)
    # (label, line, the first row's line)
    duplicates: list[tuple[str, int, int]] = dataclasses.field(default_factory=list)


def _short(line: str) -> str:
    return repr(line.strip()[:40])


def _header_tokens(line: str) -> tuple[list[str], tuple[str, ...]]:
    """Device names and trailing column names of a header line. A mangled header may have lost
    its tabs ("GPU0GPU1...GPU7mlx5_0"), so GPU names are split apart wherever they touch."""
    found = {c: m.start() for c, r in _COLUMN_RES.items() if (m := r.search(line))}
    devices_part = line[: min(found.values())] if found else line
    columns = tuple(sorted(found, key=found.__getitem__))
    tokens: list[str] = []
    for word in devices_part.split():
        tokens += [t for t in re.split(r"(GPU[0-9]+)", word) if t]
    return tokens, columns


def _is_cell(token: str) -> bool:
    return token.upper() in ("X", UNKNOWN) or token.upper() in P2P_VALUES or _label(token) is not None


def _is_header(line: str) -> bool:
    tokens, columns = _header_tokens(line)
    if tokens[1:2] and _is_cell(tokens[1]):
        return False  # a data row: its label, then cells
    return bool(columns) or tokens[:1] == ["GPU0"]


def _row_of(line: str, devices: list[str]) -> bool:
    """Whether a line that starts as a header does (``GPU0``) is a row of the matrix whose header named
    ``devices``: its label a device, then a value that is no device name (rocm-smi's ``0``, cells run
    together), where a repeated header names devices only."""
    tokens, columns = _header_tokens(line)
    return (
        not columns
        and len(tokens) > 1
        and tokens[0] in devices
        and tokens[1] not in devices
        and not GPU_RE.fullmatch(tokens[1])
    )


TABS, STOPS, SPACES = "tabs", "tab stops", "spaces"  # how a row's cells are separated


def _split_row(line: str) -> tuple[str, list[str], str]:
    """Row label, its cells, and how they were separated: TABS and STOPS (spaces that are expanded
    tabs) keep empty cells in their places, though STOPS lose those at the end of the line; in
    other space-aligned text (SPACES) empty cells vanish."""
    raw, line = line, line.strip(" ")
    label = line.split(None, 1)[0]
    rest = line[line.index(label) + len(label) :]
    if "\t" in rest:
        # No value nvidia-smi writes in a row holds a space: " X NV12" is two cells whose tab was lost.
        fields = [part for f in rest.split("\t") for part in (f.split() or [""])]
        return label, fields[1:] if not fields[0] else fields, TABS
    stops = _fields_at_tab_stops(raw.rstrip())
    if stops is not None:
        return label, stops[1:], STOPS
    return label, rest.split(), SPACES


TAB_STOP = 8  # where a terminal, ``expand`` and Python's expandtabs() put tab stops


def _fields_at_tab_stops(line: str) -> list[str] | None:
    """The tab-separated fields of a line whose tabs were expanded to spaces, empty fields
    included, or None when its fields do not start at tab stops (then the spaces are no tabs).
    A tab ends a field at the next stop, so a field that starts a stop further on had an empty
    one before it. nvidia-smi pads only the row label and the diagonal cell (" X ", one column
    past its stop), and writes no row value with a space in it. A line indented before or after
    its tabs were expanded has its stops counted from its first column or from its label."""
    for origin in dict.fromkeys((0, len(line) - len(line.lstrip(" ")))):
        fields: list[str] = []
        stop = 0  # the first stop the next field may start at
        for m in re.finditer(r"\S+", line[origin:]):
            if m.start() < stop * TAB_STOP or (fields and m.start() % TAB_STOP > 1):
                break  # the label may be padded (" GPU0" in topo -p2p), no other field
            fields += [""] * (m.start() // TAB_STOP - stop) + [m.group()]
            stop = m.end() // TAB_STOP + 1
        else:
            return fields
    return None


def read_table(text: str) -> _Table:
    lines = _TERMINAL_CODES_RE.sub("", text).splitlines()
    start = next((i for i, ln in enumerate(lines) if _is_header(ln)), None)
    warnings: list[str] = []
    header_devs: list[str]
    columns: tuple[str, ...]
    if start is None:
        # No header: a matrix whose header was lost still names its devices in the row labels.
        start = next(
            (i for i, ln in enumerate(lines) if ln.split()[:1] == ["GPU0"] and _split_row(ln)[1][:1] == ["X"]), None
        )
        if start is None:
            raise SmiParseError("no nvidia-smi topology matrix: no header line naming GPU0 and no GPU0 row")
        header_devs, columns = [], ()
        warnings.append("no header line; the devices are the row labels and no trailing column is read")
        body_start, header_line = start, None
    else:
        header_devs, columns = _header_tokens(lines[start])
        body_start, header_line = start + 1, start + 1
    rows: dict[str, tuple[list[str], str]] = {}
    order: list[str] = []
    row_lines: dict[str, int] = {}
    duplicates: list[tuple[str, int, int]] = []
    end = len(lines)
    for i in range(body_start, len(lines)):
        line = lines[i]
        if not line.strip():
            if rows:
                end = i
                break
            continue
        if line.strip().lower().startswith(("legend", "nic legend")) or _NIC_LEGEND_RE.match(line):
            end = i
            break
        if _is_header(line) and not _row_of(line, header_devs):
            warnings.append(f"repeated header line ignored: {_short(line)}")
            continue
        label, cells, layout = _split_row(line)
        if not (label in header_devs or GPU_RE.fullmatch(label) or (cells and _is_cell(cells[0]))):
            warnings.append(f"line ignored, not a matrix row: {_short(line)}")
            continue
        if label in rows:
            warnings.append(f"duplicate row for {label} ignored")
            duplicates.append((label, i + 1, row_lines[label]))
            continue
        rows[label] = (cells, layout)
        row_lines[label] = i + 1
        order.append(label)
    devices = _repair_header(header_devs, order) if header_devs else list(order)
    extra = [label for label in order if label not in devices]
    if extra and set(devices) <= set(order):
        warnings.append(f"header lacks {', '.join(extra)}; the columns are taken from the row labels")
        devices = list(order)
    elif extra:
        warnings.append(f"rows not named in the header ignored: {', '.join(extra)}")
    twice = [d for d, count in Counter(devices).items() if count > 1]
    if twice:
        # nvidia-smi names each device once; a cell is placed by its column, so every cell after the
        # second name would be read one column off.
        raise SmiParseError(
            f"line {header_line}: the header names {twice[0]} twice: not a header nvidia-smi "
            f"writes, so which column is whose is unknown"
        )
    return _Table(devices, columns, rows, lines[end:], warnings, header_line, row_lines, duplicates)


def _repair_header(tokens: list[str], labels: list[str]) -> list[str]:
    """Split header tokens that are several row labels run together ("mlx5_0mlx5_1")."""
    out: list[str] = []
    for tok in tokens:
        parts: list[str] = []
        rest = tok
        while rest:
            match = max((lb for lb in labels if rest.startswith(lb)), key=len, default=None)
            if match is None:
                break
            parts.append(match)
            rest = rest[len(match) :]
        out += parts if (tok not in labels and parts and not rest) else [tok]
    return out


# ---------------------------------------------------------------------------------------------
# topo -m


def _label(cell: str) -> str | None:
    """The canonical label ("SOC" -> "SYS", "nv12" -> "NV12"), or None when it is not one."""
    try:
        return str(model.LinkLabel.parse(cell))
    except ValueError:
        return None


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
            if head.upper() == "X" or _label(head):
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
        if not raw or _is_cell(raw):
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


def require_gpu_rows(table: _Table, gpu_names: list[str], what: str) -> None:
    """Refuse a matrix with no GPU, or whose GPUs have no row: nvidia-smi writes a row per GPU under
    its header, so a header alone (a capture cut after it) says nothing of any link."""
    where = f"line {table.header_line}: " if table.header_line else ""
    if not gpu_names:
        raise SmiParseError(f"{where}no nvidia-smi {what} matrix: the header names no GPU")
    if not any(d in table.rows for d in gpu_names):
        raise SmiParseError(
            f"{where}no nvidia-smi {what} matrix: the header names {', '.join(gpu_names[:4])}"
            f"{', ...' if len(gpu_names) > 4 else ''} and no GPU row follows it (a capture cut "
            f"after its header?)"
        )


def parse_topo_matrix(text: str) -> SmiTopo:
    """The ``nvidia-smi topo -m`` matrix in ``text`` (other lines around it are ignored). Text that
    is no such matrix is refused, never read as GPUs with unknown links; another tool's text (rocm-smi's,
    ``-q``'s) is refused naming the tool (``parse.which_tool``)."""
    if why := refusal(text, "smi-topo"):
        raise SmiParseError(why)
    table = read_table(text)
    warnings, devices, n = table.warnings, table.devices, len(table.devices)
    gpu_names = [d for d in devices if GPU_RE.fullmatch(d)]
    nic_names = [d for d in devices if d not in gpu_names]
    require_gpu_rows(table, gpu_names, "topology")
    if gpu_names != [f"GPU{i}" for i in range(len(gpu_names))]:
        warnings.append(f"GPU names are not GPU0..GPU{len(gpu_names) - 1}: {' '.join(gpu_names)}")
    col = {d: j for j, d in enumerate(devices)}
    read = {d: _row_cells(d, table.rows[d][0], devices, warnings) for d in devices if d in table.rows}
    if len(gpu_names) == 1:
        # One GPU: no pair cell says this is nvidia-smi's matrix; its own cell must (rocm-smi prints 0 there).
        only = gpu_names[0]
        own = read[only][0][col[only]] if col[only] < len(read[only][0]) else ""
        if own.upper() != "X":
            raise SmiParseError(
                f"line {table.row_lines[only]}: no nvidia-smi topology matrix: {only}'s own cell is "
                f"{own[:20]!r}, where nvidia-smi topo -m prints X"
            )
    widths = {
        layout: [
            _width(after, layout)
            for d in gpu_names
            if d in read and (after := read[d][1]) is not None and table.rows[d][1] == layout
        ]
        for layout in (TABS, STOPS)
    }
    cells, gpus = {}, []  # (row, col) -> canonical label; a missing cell stays absent
    for d in devices:
        if d not in table.rows:
            warnings.append(f"no row for {d}")
            if d in gpu_names:
                gpus.append(SmiGpu(d))
            continue
        layout = table.rows[d][1]
        row, trailing = read[d]
        if d in gpu_names and len(row) == n and trailing and _lost_a_tab(trailing, layout, widths, table.columns):
            warnings.append(
                f"{d}: its values after the matrix cannot be placed (a blank one, or a tab lost next "
                f"to one); its {', '.join(table.columns) or 'values'} are unknown"
            )
            trailing = None
            if re.fullmatch(r"NV[0-9]{2,}", row[-1]):  # "NV1" run into a CPU list "8-15"
                warnings.append(
                    f"{d}-{devices[-1]}: {row[-1]} may end in the first digits of the value after "
                    f"it; the cell is unknown"
                )
                row = row[:-1] + [""]
        present = sum(1 for f in row if f)  # an empty cell is a missing one (a cut tab row)
        if present < n and trailing is not None:
            warnings.append(f"{d} row has {present} of {counted(n, 'cell')}")
        for other, raw in zip(devices, row, strict=False):  # a cut row is shorter: its missing cells stay absent
            if not raw:
                continue
            if other == d:
                if raw.upper() != "X":
                    warnings.append(f"{d}: diagonal cell is {raw!r}, expected X")
            elif _label(raw) is None:
                warnings.append(f"{d}-{other}: unreadable cell {raw!r}")
            else:
                cells[d, other] = _label(raw)
        if d in gpu_names:
            values = {} if trailing is None else _trailing(d, trailing, layout, table.columns, warnings)
            gpus.append(SmiGpu(d, values.get("CPU Affinity"), values.get("NUMA Affinity"), values.get("GPU NUMA ID")))

    def cell(a: str, b: str) -> str:
        if a == b:
            return "X"
        # The matrix is symmetric: a cell missing one way is read from the other.
        here, there = cells.get((a, b)), cells.get((b, a))
        if here and there and here != there and col[a] < col[b]:
            warnings.append(f"{a}-{b} reads {here} one way and {there} the other")
        return here or there or UNKNOWN

    if len(gpu_names) >= 2 and not any(a in gpu_names and b in gpu_names for a, b in cells):
        raise SmiParseError(
            "no nvidia-smi topology matrix: not one GPU pair's cell is a link nvidia-smi "
            "prints (NV#, PIX, PXB, PHB, NODE, SYS)"
        )
    matrix = tuple(tuple(cell(a, b) for b in gpu_names) for a in gpu_names)
    gpu_nic = tuple(tuple(cell(a, b) for b in nic_names) for a in gpu_names)
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
