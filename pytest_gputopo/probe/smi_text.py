"""Read (and write) the text of ``nvidia-smi topo -m`` and ``nvidia-smi topo -p2p <r|w|n|a>``.

Real outputs come tab-separated (cells padded like ``"\\t X \\t"``, empty trailing cells) or
space-aligned (tabs expanded by a paste), sometimes cut short or with a mangled header. The header
says which columns exist; the rows give the cells. Whatever can be read is returned, what could not
is a warning; text with no GPU matrix at all is an ``SmiParseError``, and nothing else is raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import model

TRAILING = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
# Tolerate case and lost spaces ("CPUAffinity") in a mangled header.
_COLUMN_RES = {c: re.compile(r"\s*".join(c.split()), re.IGNORECASE) for c in TRAILING}
_GPU_RE = re.compile(r"GPU[0-9]+")
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC[0-9]+)\s*:\s*(\S+)\s*$")
_P2P_VALUES = {s.value for s in model.P2PStatus}
UNKNOWN = "?"

LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""

P2P_LEGEND = """Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  DR   = Disabled by regkey
  U    = Unknown
"""


# rocm-smi's banner and its --showtopo section titles ("Weight between two GPUs", "Link Type ...").
_ROCM_RE = re.compile(r"ROCm System Management Interface|^=+ [A-Za-z ]+ between two GPUs =+", re.MULTILINE)


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

    def to_json(self) -> dict:
        return {"gpus": [{"name": g.name, "cpu_affinity": g.cpu_affinity, "numa_affinity": g.numa_affinity,
                          "gpu_numa_id": g.gpu_numa_id} for g in self.gpus],
                "nics": list(self.nics), "matrix": [list(r) for r in self.matrix],
                "gpu_nic": [list(r) for r in self.gpu_nic], "warnings": list(self.warnings)}


# ---------------------------------------------------------------------------------------------
# The matrix as a table: header devices, trailing columns, and one list of cells per row label


@dataclass
class _Table:
    devices: list
    columns: tuple
    rows: dict  # label -> (cells, tab_separated)
    rest: list  # the lines after the matrix (for the NIC Legend)
    warnings: list


def _short(line: str) -> str:
    return repr(line.strip()[:40])


def _header_tokens(line: str) -> tuple[list, tuple]:
    """Device names and trailing column names of a header line. A mangled header may have lost
    its tabs ("GPU0GPU1...GPU7mlx5_0"), so GPU names are split apart wherever they touch."""
    found = {c: m.start() for c, r in _COLUMN_RES.items() if (m := r.search(line))}
    devices_part = line[:min(found.values())] if found else line
    columns = tuple(sorted(found, key=found.get))
    tokens = []
    for word in devices_part.split():
        tokens += [t for t in re.split(r"(GPU[0-9]+)", word) if t]
    return tokens, columns


def _is_cell(token: str) -> bool:
    return token.upper() in ("X", UNKNOWN) or token.upper() in _P2P_VALUES or _label(token) is not None


def _is_header(line: str) -> bool:
    tokens, columns = _header_tokens(line)
    if tokens[1:2] and _is_cell(tokens[1]):
        return False  # a data row: its label, then cells
    return bool(columns) or tokens[:1] == ["GPU0"]


def _split_row(line: str) -> tuple[str, list, bool]:
    """Row label, its cells, and whether they are tab-separated (where empty cells keep their
    place) rather than space-aligned (where empty cells vanish)."""
    line = line.strip(" ")
    label = line.split(None, 1)[0]
    rest = line[line.index(label) + len(label):]
    if "\t" in rest:
        fields = [f.strip() for f in rest.split("\t")]
        return label, fields[1:] if not fields[0] else fields, True
    return label, rest.split(), False


def _read_table(text: str) -> _Table:
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _is_header(ln)), None)
    warnings = []
    if start is None:
        # No header: a matrix whose header was lost still names its devices in the row labels.
        start = next((i for i, ln in enumerate(lines)
                      if ln.split()[:1] == ["GPU0"] and _split_row(ln)[1][:1] == ["X"]), None)
        if start is None:
            raise SmiParseError("no nvidia-smi topology matrix: no header line naming GPU0 and no GPU0 row")
        header_devs, columns = [], ()
        warnings.append("no header line; the devices are the row labels and no trailing column is read")
        body_start = start
    else:
        header_devs, columns = _header_tokens(lines[start])
        body_start = start + 1
    rows, order = {}, []
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
        if _is_header(line):
            warnings.append(f"repeated header line ignored: {_short(line)}")
            continue
        label, cells, tabbed = _split_row(line)
        if not (label in header_devs or _GPU_RE.fullmatch(label) or (cells and _is_cell(cells[0]))):
            warnings.append(f"line ignored, not a matrix row: {_short(line)}")
            continue
        if label in rows:
            warnings.append(f"duplicate row for {label} ignored")
            continue
        rows[label] = (cells, tabbed)
        order.append(label)
    devices = _repair_header(header_devs, order) if header_devs else list(order)
    extra = [label for label in order if label not in devices]
    if extra and set(devices) <= set(order):
        warnings.append(f"header lacks {', '.join(extra)}; the columns are taken from the row labels")
        devices = list(order)
    elif extra:
        warnings.append(f"rows not named in the header ignored: {', '.join(extra)}")
    seen = set()
    unique = [d for d in devices if not (d in seen or seen.add(d))]
    if len(unique) != len(devices):
        warnings.append("the header names a device twice; the first column is used")
    return _Table(unique, columns, rows, lines[end:], warnings)


def _repair_header(tokens: list, labels: list) -> list:
    """Split header tokens that are several row labels run together ("mlx5_0mlx5_1")."""
    out = []
    for tok in tokens:
        parts, rest = [], tok
        while rest:
            match = max((lb for lb in labels if rest.startswith(lb)), key=len, default=None)
            if match is None:
                break
            parts.append(match)
            rest = rest[len(match):]
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


def _trailing(label: str, fields: list, tabbed: bool, columns: tuple, warnings: list) -> dict:
    """Map the fields after the matrix cells onto the header's trailing columns. nvidia-smi
    writes an extra empty field before GPU NUMA ID, so that column takes the last value."""
    if not tabbed and fields and len(fields) != len(columns):
        # Space-aligned text drops empty cells, so which value belongs where is unknowable.
        warnings.append(f"{label}: {len(fields)} values for {len(columns)} trailing columns in "
                        f"space-aligned text; they are left unknown")
        return {}
    values = {}
    for i, col in enumerate(columns):
        if col == "GPU NUMA ID":
            present = [f for f in fields[i:] if f]
            values[col] = present[-1] if present else None
        else:
            values[col] = (fields[i] if i < len(fields) else "") or None
    return values


def parse_topo_matrix(text: str) -> SmiTopo:
    """The ``nvidia-smi topo -m`` matrix in ``text`` (other lines around it are ignored). Text that
    is no such matrix is refused, never read as GPUs with unknown links."""
    if _ROCM_RE.search(text):
        raise SmiParseError("this is rocm-smi output (AMD GPUs), not nvidia-smi topo -m: "
                            "pytest-gputopo reads NVIDIA machines only")
    table = _read_table(text)
    warnings, devices, n = table.warnings, table.devices, len(table.devices)
    gpu_names = [d for d in devices if _GPU_RE.fullmatch(d)]
    nic_names = [d for d in devices if d not in gpu_names]
    if not gpu_names:
        warnings.append("the header names no GPUs")
    elif gpu_names != [f"GPU{i}" for i in range(len(gpu_names))]:
        warnings.append(f"GPU names are not GPU0..GPU{len(gpu_names) - 1}: {' '.join(gpu_names)}")
    col = {d: j for j, d in enumerate(devices)}
    cells, gpus = {}, []  # (row, col) -> canonical label; a missing cell stays absent
    for d in devices:
        if d not in table.rows:
            warnings.append(f"no row for {d}")
            if d in gpu_names:
                gpus.append(SmiGpu(d))
            continue
        fields, tabbed = table.rows[d]
        present = sum(1 for f in fields[:n] if f)  # an empty cell is a missing one (a cut tab row)
        if present < n:
            warnings.append(f"{d} row has {present} of {n} cells")
        for j, raw in enumerate(fields[:n]):
            other = devices[j]
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
            values = _trailing(d, fields[n:], tabbed, table.columns, warnings)
            gpus.append(SmiGpu(d, values.get("CPU Affinity"), values.get("NUMA Affinity"),
                               values.get("GPU NUMA ID")))

    def cell(a: str, b: str) -> str:
        if a == b:
            return "X"
        # The matrix is symmetric: a cell missing one way is read from the other.
        here, there = cells.get((a, b)), cells.get((b, a))
        if here and there and here != there and col[a] < col[b]:
            warnings.append(f"{a}-{b} reads {here} one way and {there} the other")
        return here or there or UNKNOWN

    if len(gpu_names) >= 2 and not any(a in gpu_names and b in gpu_names for a, b in cells):
        raise SmiParseError("no nvidia-smi topology matrix: not one GPU pair's cell is a link nvidia-smi "
                            "prints (NV#, PIX, PXB, PHB, NODE, SYS)")
    matrix = tuple(tuple(cell(a, b) for b in gpu_names) for a in gpu_names)
    gpu_nic = tuple(tuple(cell(a, b) for b in nic_names) for a in gpu_names)
    legend = {}
    for line in table.rest:
        m = _NIC_LEGEND_RE.match(line)
        if m:
            legend.setdefault(m.group(1), m.group(2))
    unnamed = [d for d in nic_names if re.fullmatch(r"NIC[0-9]+", d) and d not in legend]
    if unnamed:
        warnings.append(f"no NIC Legend entry for {', '.join(unnamed)}; the row label is used as its name")
    return SmiTopo(gpus=tuple(gpus), nics=tuple(legend.get(d, d) for d in nic_names), matrix=matrix,
                   gpu_nic=gpu_nic, columns=table.columns, warnings=tuple(warnings))


# ---------------------------------------------------------------------------------------------
# topo -p2p


def parse_p2p_matrix(text: str) -> tuple[tuple[str, ...], ...]:
    """One ``nvidia-smi topo -p2p <r|w|n|a>`` matrix: GPU x GPU status abbreviations ("OK",
    "GNS", ...), "X" on the diagonal, "U" where a cell is missing or unreadable."""
    table = _read_table(text)
    gpus = [d for d in table.devices if _GPU_RE.fullmatch(d)]
    if not gpus:
        raise SmiParseError("no nvidia-smi P2P matrix: the header names no GPUs")
    col = {d: j for j, d in enumerate(table.devices)}

    def cell(a: str, b: str) -> str | None:
        fields = table.rows.get(a, ([], True))[0]
        raw = fields[col[b]].upper() if col[b] < len(fields) else ""
        return raw if raw in _P2P_VALUES else None

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


def _p2p_status(matrix, a: int, b: int, warnings: list, cap: str) -> model.P2PStatus:
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


def to_topology(smi: SmiTopo, p2p: dict | None = None, name: str | None = None) -> model.Topology:
    """The model of what the text says; everything it does not say is None (unknown)."""
    p2p = p2p or {}
    bad = set(p2p) - set(model.P2P_CAPS)
    if bad:
        raise ValueError(f"unknown P2P capability {sorted(bad)[0]!r} (expected one of {model.P2P_CAPS})")
    warnings = list(smi.warnings)
    # nvidia-smi numbers GPUs by their NVML index: GPU<i> of the text is NVML index i.
    gpus = tuple(model.Gpu(index=i, nvml_index=i, cpu_affinity=g.cpu_affinity,
                           numa_node=int(g.numa_affinity) if re.fullmatch(r"[0-9]+", g.numa_affinity or "")
                           else None)
                 for i, g in enumerate(smi.gpus))
    links = []
    for a in range(len(gpus)):
        for b in range(a + 1, len(gpus)):
            link = _link(a, b, _worse_label(smi.matrix[a][b], smi.matrix[b][a]))
            status = {cap: _p2p_status(m, a, b, warnings, cap) for cap, m in p2p.items()}
            links.append(model.Link(a, b, link.pcie, link.nvlinks, model.P2P(**status)))
    return model.Topology(gpus=gpus, links=tuple(links), source=model.Source("smi-text", name),
                          nics=smi.nics, warnings=tuple(dict.fromkeys(warnings)))


def render_topo_matrix(topology: model.Topology) -> str:
    """``nvidia-smi topo -m`` text (tab-separated, current legend) for the GPUs of ``topology``.
    A pair with no known label is written "?", which reads back as unknown."""
    n = len(topology.gpus)
    lines = ["\t" + "".join(f"GPU{i}\t" for i in range(n)) + "CPU Affinity\tNUMA Affinity"]
    for a, gpu in enumerate(topology.gpus):
        cells = []
        for b in range(n):
            label = topology.link(a, b).label if a != b else None
            cells.append(" X " if a == b else str(label) if label else UNKNOWN)
        numa = "N/A" if gpu.numa_node is None else str(gpu.numa_node)
        lines.append("\t".join([f"GPU{a}", *cells, gpu.cpu_affinity or "", numa]))
    return "\n".join(lines) + "\n\n" + LEGEND


def render_p2p_matrix(topology: model.Topology, cap: str = "read") -> str:
    """``nvidia-smi topo -p2p`` text for one capability ("read", "write", "nvlink", "atomics")."""
    if cap not in model.P2P_CAPS:
        raise ValueError(f"unknown P2P capability {cap!r} (expected one of {model.P2P_CAPS})")
    n = len(topology.gpus)
    lines = [" \t" + "".join(f"GPU{i}\t" for i in range(n))]
    for a in range(n):
        cells = ["X" if a == b else getattr(topology.link(a, b).p2p, cap).value for b in range(n)]
        lines.append(f" GPU{a}\t" + "".join(f"{c}\t" for c in cells))
    return "\n".join(lines) + "\n\n" + P2P_LEGEND
