"""nvidia-smi's topology matrices as a table: the grid ``topo -m`` and ``topo -p2p`` both print (a
header naming the devices and trailing columns, then one row of cells per device), read from text that
came tab-separated, with its tabs expanded (tab stops) or space-aligned, cut short or with a mangled
header. What each cell means is the reader's: ``parse.smi_topo`` (links) and ``parse.smi_machine``
(P2P statuses)."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass

from ..core import model

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


@dataclass
class Table:
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


def is_cell(token: str) -> bool:
    return token.upper() in ("X", UNKNOWN) or token.upper() in P2P_VALUES or link_label(token) is not None


def _is_header(line: str) -> bool:
    tokens, columns = _header_tokens(line)
    if tokens[1:2] and is_cell(tokens[1]):
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


def read_table(text: str) -> Table:
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
        if not (label in header_devs or GPU_RE.fullmatch(label) or (cells and is_cell(cells[0]))):
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
    return Table(devices, columns, rows, lines[end:], warnings, header_line, row_lines, duplicates)


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


def link_label(cell: str) -> str | None:
    """The canonical label ("SOC" -> "SYS", "nv12" -> "NV12"), or None when it is not one."""
    try:
        return str(model.LinkLabel.parse(cell))
    except ValueError:
        return None


def require_gpu_rows(table: Table, gpu_names: list[str], what: str) -> None:
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
