"""NVIDIA ``nvbandwidth``'s text, read line by line: which rule each line follows (the rules are
``parse.nvbandwidth``'s docstring), and what the lines said so far -- the header, the devices, each
testcase and its matrices, and a warning for every line that could not be read whole.
``parse.nvbandwidth`` freezes what a ``LineReader`` gathered into its result.
"""

from __future__ import annotations

import re

from .cells import INT_RE, NA, BadCell, cell_float

_KEY_RE = re.compile(r"[A-Za-z0-9_]{1,200}")  # a testcase key (testKey()): lowercase words and digits
# How a complete cell or sum ends: "%.2f". A last line without a newline may be cut inside a number.
_PRINTED_RE = re.compile(r"[+-]?\d{1,30}\.\d\d")
_BUS_RE = re.compile(r"[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}")
_BISECT_RE = re.compile(r"\d{1,9}->\d{0,9}")  # multinode bisect row labels: "0->4", " 0-> 8" (padded ids)
_NOT_FOUND_RE = re.compile(r"Testcase (?:index )?(\S{1,200}) (?:not found!|out of bound!)")
_CUDA_RE = re.compile(r"\d{1,4}\.\d{1,4}")
# What a failed CU_ASSERT / CUDA_ASSERT / NVML_ASSERT / ASSERT prints (error_handling.h) before exit(1).
_FATAL = ("[CUDA_ERROR", "[cudaError", "NVML_ERROR:", "ASSERT in expression")
_IGNORED = frozenset({"COEFFICIENT_OF_VARIATION", "MIN", "MAX", "AVG"})  # per-key figures we do not keep
# splitlines() ends a line at each of these; a text not ending with one was cut (or pasted without).
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
# Bounds that keep the work linear in the text: a real matrix has at most a few hundred columns, and
# no more rows than columns (square or one row) unless it has one column (bisect).
MAX_COLUMNS = 1024


def _short(tok: str) -> str:
    return repr(tok[:24])


def title_unit(title: str) -> str:
    """ "GB/s" of "... bandwidth (GB/s)"; "" when the title does not end in a parenthesised unit."""
    if not title.endswith(")"):
        return ""
    start = title.rfind(" (")
    unit = title[start + 2 : -1] if start >= 0 else ""
    return unit if unit and len(unit) <= 16 and not any(c in unit for c in " ()") else ""


def _cuda_version(value: str) -> str | None:
    """ "13.2" of "13.2 (13020)" (v0.10) or of "13020" (v0.8: cudaRuntimeGetVersion's 1000*major + 10*minor)."""
    tokens = value.split()
    if not tokens:
        return None
    if _CUDA_RE.fullmatch(tokens[0]):
        return tokens[0]
    if INT_RE.fullmatch(tokens[0]) and 0 < int(tokens[0]) < 10**7:
        code = int(tokens[0])
        return f"{code // 1000}.{code % 1000 // 10}"
    return None


def _before_v06(version: str | None) -> bool:
    m = re.match(r"v?(\d{1,6})\.(\d{1,6})", version or "")
    return m is not None and (int(m.group(1)), int(m.group(2))) < (0, 6)


def _row_label(tokens: list[str]) -> tuple[str | None, list[str]]:
    first = tokens[0]
    if INT_RE.fullmatch(first):
        return first, tokens[1:]
    if _BISECT_RE.fullmatch(first):
        if first.endswith("->") and len(tokens) > 1 and INT_RE.fullmatch(tokens[1]):
            return f"{first} {tokens[1]}", tokens[2:]
        return first, tokens[1:]
    return None, tokens


class ReadMatrix:
    """A result matrix as its lines come: rows and cells so far, its SUM line's key and sum."""

    def __init__(self, where: str, title: str, columns: tuple[str, ...]) -> None:
        self.where = where  # names it in warnings: "<testcase>: matrix 2"
        self.title = title
        self.columns = columns
        self.rows: list[str] = []
        self.cells: list[tuple[float | None, ...]] = []
        self.key: str | None = None
        self.sum: float | None = None
        self.has_sum = False
        self.blank_after = False  # a blank line came after its rows


class ReadTestcase:
    """A testcase as its lines come: its name, status, message and matrices so far."""

    def __init__(self, name: str, status: str, message: str | None = None, running: bool = False) -> None:
        self.name, self.status, self.message, self.running = name, status, message, running
        self.matrices: list[ReadMatrix] = []


class LineReader:
    """What the text says, gathered line by line."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.version: str | None = None
        self.runs = 0  # "nvbandwidth Version" lines: each starts a run
        self.driver: str | None = None
        self.cuda: str | None = None
        self.devices: dict[int, tuple[str, str | None]] = {}
        self.testcases: list[ReadTestcase] = []
        self.current: ReadTestcase | None = None  # the testcase whose results are being printed
        # Its matrix still taking rows: until its SUM line or a line that is no row (blank lines are
        # skipped: pasted copies are sometimes double-spaced).
        self.matrix: ReadMatrix | None = None
        self.title: str | None = None  # the last line no rule read: a matrix's title if a head row follows
        self.running_seen = False
        self.run_open = False  # a run's header or testcase came after the last closing NOTE

    # ------------------------------------------------------------------------------ the driver

    def read(self, text: str) -> None:
        lines = text.splitlines()
        cut = bool(lines) and text[-1] not in _BREAKS
        for index, raw in enumerate(lines):
            self.line(raw, cut and index == len(lines) - 1)
        m = self.matrix
        if m is not None and not m.blank_after:
            last = f", after row {m.rows[-1]}" if m.rows else ", after its head row"
            self.notes.append(f"the text ends inside {m.where}{last}")
        if self.run_open and not _before_v06(self.version):
            # From v0.6 printInfo closes every run; v0.5 printed its NOTE first.
            self.notes.append(
                "the text ends before nvbandwidth's closing NOTE: it may be cut short (or the run stopped)"
            )

    def line(self, raw: str, cut: bool) -> None:
        tokens = raw.split()
        if not tokens:
            if self.matrix is not None:
                self.matrix.blank_after = True
            return
        first = tokens[0]
        if first in ("SUM", "&&&&"):
            if first == "SUM" or tokens[1:2] == ["PERF"]:
                self.title = None
                return self.sum_line(tokens, cut, perf=first == "&&&&")
        if self.keyword(raw.strip(), tokens, cut):
            self.title = None
            return
        m = self.matrix
        if m is not None:
            if self.row(m, tokens, cut):
                return
            self.end_matrix()
            self.notes.append(f"{m.where}: the line {_short(raw.strip())} is no matrix row; the matrix ends there")
        elif all(INT_RE.fullmatch(t) for t in tokens):
            if self.head(tokens, cut):
                self.title = None
                return
        self.title = raw.strip()

    def end_matrix(self) -> None:
        self.matrix = None

    def end_testcase(self) -> None:
        self.end_matrix()
        self.current = None

    # ----------------------------------------------------------------------- lines by their rule

    def keyword(self, line: str, tokens: list[str], cut: bool) -> bool:
        """Reads a line that a rule names; False when none does."""
        first = tokens[0]
        if first == "Running" and len(tokens) == 2 and tokens[1].endswith(".") and _KEY_RE.fullmatch(tokens[1][:-1]):
            self.end_testcase()
            self.current = ReadTestcase(tokens[1][:-1], "ran", running=True)
            self.add(self.current)
            self.running_seen = True
        elif first == "Waived:":
            self.end_testcase()
            self.add(ReadTestcase("", "waived", self.message(line, "Waived:", cut)))
        elif first == "Error:":
            message = self.message(line, "Error:", cut)
            tc = self.current
            if tc is not None and tc.status == "ran":
                tc.status, tc.message = "error", message
            else:
                self.add(ReadTestcase("", "error", message))
            self.end_testcase()
        elif first == "ERROR:":
            self.end_testcase()
            message = self.message(line, "ERROR:", cut) or ""
            found = _NOT_FOUND_RE.fullmatch(message)
            if found:  # runTestcase: an id that names no testcase
                self.add(ReadTestcase(found.group(1), "error", message))
            else:
                self.notes.append(f"nvbandwidth reported an error: {message[:160]}")
        elif line.startswith(_FATAL):
            tc = self.current
            if tc is not None and tc.status == "ran":
                tc.status, tc.message = "error", line[:500]
            else:
                self.notes.append(f"nvbandwidth stopped on an error: {line[:160]}")
            self.end_testcase()
        elif first in _IGNORED and len(tokens) == 3:
            self.end_matrix()
        elif first == "NOTE:":
            self.end_testcase()
            if line.startswith("NOTE: The reported results"):
                self.run_open = False
        elif line.startswith(("nvbandwidth Version:", "CUDA Runtime Version:", "Driver Version:")):
            self.end_testcase()
            if cut:
                self.notes.append(f"the text ends inside the line {_short(line)}: it is not read")
            else:
                self.header(line)
        elif line.startswith(("Built from Git version:", "CUDA Driver Version")):
            self.end_testcase()
        elif first == "Device" and len(tokens) > 1 and tokens[1].endswith(":") and INT_RE.fullmatch(tokens[1][:-1]):
            self.end_testcase()
            if cut:
                self.notes.append(f"the text ends inside the line {_short(line)}: it is not read")
            else:
                self.device(line, int(tokens[1][:-1]))
        else:
            return False
        return True

    def add(self, tc: ReadTestcase) -> None:
        self.testcases.append(tc)
        self.run_open = True

    def message(self, line: str, status: str, cut: bool) -> str | None:
        message = line[len(status) :].strip() or None
        if cut and message:
            self.notes.append(f"the text ends inside the line {_short(line)}: its message may be cut")
        return message

    def header(self, line: str) -> None:
        name, _, value = line.partition(":")
        value = value.strip()
        if name == "nvbandwidth Version":
            self.runs += 1
            self.run_open = True
            if self.runs == 2:
                self.notes.append(
                    "the text holds several nvbandwidth runs: their testcases are listed in order, "
                    "the header is the first run's"
                )
            if self.version is None:
                self.version = value or None
            elif value != self.version:
                self.notes.append(f"a later run is nvbandwidth {value[:40]}, the first {self.version}")
        elif name == "CUDA Runtime Version":
            cuda = _cuda_version(value)
            if cuda is None:
                self.notes.append(f"the CUDA runtime version {_short(value)} is not a version")
            elif self.cuda is None:
                self.cuda = cuda
        elif self.driver is None:
            self.driver = value.split()[0] if value else None

    def device(self, line: str, index: int) -> None:
        name = line.partition(":")[2].strip()
        bus = None
        start = name.rfind(" (")
        if name.endswith(")") and start >= 0 and _BUS_RE.fullmatch(name[start + 2 : -1]):
            name, bus = name[:start].strip(), name[start + 2 : -1]
        if index not in self.devices:
            self.devices[index] = (name, bus)
        elif self.devices[index] != (name, bus):
            self.notes.append(f"device {index} is listed twice, differently; the first is kept")

    def head(self, tokens: list[str], cut: bool) -> bool:
        """A head row of column labels; False when it cannot start a matrix here."""
        tc = self.current
        if tc is None or tc.status != "ran":
            if self.title is not None and title_unit(self.title) in ("GB/s", "ns"):
                self.notes.append(
                    "a result matrix with no 'Running <testcase>.' line before it is not read "
                    "(the text is cut at the top?)"
                )
            return False
        columns = list(tokens)
        # Column labels count 0, 1, 2 ...: a last label cut short ("1" of "10") breaks the count.
        if cut and not (columns[-1] == str(len(columns) - 1) and columns == [str(i) for i in range(len(columns))]):
            self.notes.append(f"the text ends inside the head row of {tc.name}: its last label is not read")
            columns.pop()
        if not columns:
            return False
        if len(columns) > MAX_COLUMNS:
            self.notes.append(f"{tc.name}: a matrix with {len(columns)} columns; the first {MAX_COLUMNS} are read")
            columns = columns[:MAX_COLUMNS]
        self.matrix = ReadMatrix(f"{tc.name}: matrix {len(tc.matrices) + 1}", self.title or "", tuple(columns))
        tc.matrices.append(self.matrix)
        return True

    def row(self, m: ReadMatrix, tokens: list[str], cut: bool) -> bool:
        """Reads a matrix row into ``m``; False when the line is no row."""
        label, cells = _row_label(tokens)
        if label is None:
            return False
        width = len(m.columns)
        if width > 1 and len(m.rows) >= width:
            self.end_matrix()
            self.notes.append(f"{m.where}: more rows than columns; the rows after row {m.rows[-1]} are not read")
            return True
        if cut:
            if not cells:  # a label alone may itself be cut ("1" of "10")
                self.notes.append(
                    f"the text ends inside {m.where}, in the row after row "
                    f"{m.rows[-1] if m.rows else 'none'}: it is not read"
                )
                return True
            if cells[-1] != NA and not _PRINTED_RE.fullmatch(cells[-1]):
                self.notes.append(
                    f"the text ends inside {m.where}, row {label}: its last cell "
                    f"{_short(cells[-1])} may be cut and is not read"
                )
                cells = cells[:-1]
        values: list[float | None] = []
        found: list[str] = []
        where = f"{m.where}, row {label}"
        broken = False
        for tok in cells[:width]:
            try:
                values.append(cell_float(tok, found))
            except BadCell:
                self.notes.append(f"{where}: the cell {_short(tok)} is neither a number nor N/A; the row ends there")
                broken = True
                break
        self.notes += [f"{where}: {note}" for note in found]
        if not broken and len(cells) > width:
            self.notes.append(f"{where}: more cells than the head row has columns; the extra are not read")
        if len(values) < width:
            self.notes.append(f"{where}: {len(values)} of {width} cells read; the rest are None")
            values += [None] * (width - len(values))
        m.rows.append(label)
        m.cells.append(tuple(values))
        return True

    def sum_line(self, tokens: list[str], cut: bool, perf: bool) -> None:
        """``SUM <key> <sum>`` or ``&&&& PERF <key> <sum> <unit>``: the sum of the last matrix."""
        at = 2 if perf else 1
        key = tokens[at] if len(tokens) > at else None
        raw = tokens[at + 1] if len(tokens) > at + 1 else None
        name = "&&&& PERF" if perf else "SUM"
        complete = perf and len(tokens) > at + 2  # its unit follows the value
        if cut and (raw is None or (not complete and not _PRINTED_RE.fullmatch(raw))):
            self.end_matrix()
            self.notes.append(f"the text ends inside the {name} line for {_short(key or '')}: it is not read")
            return
        if key is None:
            self.end_matrix()
            self.notes.append(f"a {name} line without a key is not read")
            return
        value = None
        if raw is None:
            self.notes.append(f"the {name} line for {_short(key)} has no value")
        else:
            found: list[str] = []
            try:
                value = cell_float(raw, found)
            except BadCell:
                self.notes.append(f"the {name} line for {_short(key)}: {_short(raw)} is not a number")
            self.notes += [f"the {name} line for {_short(key)}: {note}" for note in found]
        tc = self.current
        target = tc.matrices[-1] if tc is not None and tc.matrices and not tc.matrices[-1].has_sum else None
        self.end_matrix()
        if target is None:
            if tc is None or tc.status != "ran":
                self.notes.append(f"a {name} line for {_short(key)} outside any testcase is not read")
                return
            # Its matrix was lost (mangled text): the sum alone is still a figure nvbandwidth printed.
            target = ReadMatrix(f"{tc.name}: matrix {len(tc.matrices) + 1}", "", ())
            tc.matrices.append(target)
            self.notes.append(f"the {name} line for {_short(key)} has no matrix before it; its sum is kept")
        if tc is not None and not key.startswith(tc.name):  # a target is always one of tc's matrices
            self.notes.append(f"the {name} line for {_short(key)} is under testcase {tc.name}")
        target.key, target.sum, target.has_sum = key, value, True

    # --------------------------------------------------------------------------------- verdict

    def accepted(self) -> bool:
        """Whether the text held nvbandwidth output: a header, or a matrix row under a Running line."""
        return self.runs > 0 or any(m.rows for tc in self.testcases if tc.running for m in tc.matrices)
