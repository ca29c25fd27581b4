"""nccl-tests: read the result table of ``all_reduce_perf`` and its siblings, and run ``all_reduce_perf``.

The table is read by its own column header, because the columns changed over the years:
``size count type redop root`` (some tests and old versions drop ``redop`` or ``root``; the oldest
say ``bytes N type op``), then one group per placement -- ``time algbw busbw #wrong`` (old versions:
``error``/``res``, a max deviation such as ``2e-07`` instead of a count) -- out-of-place first, in-place
second (some old tests print only one), with optional extra columns (``#bitdiff``, ``i_min`` ...,
``timestamp``) that are skipped. Real logs interleave NCCL INFO lines, MPI/srun prefixes and prompts,
and published copies are often cut short; whatever can be read is returned and what could not is a
warning. Text with no result table at all raises ``NcclTestsParseError``; nothing else is raised.

``p2pBandwidthLatencyTest`` (cuda-samples) output often travels with nccl-tests output; it is
recognised and refused by ``parse_nccl_tests`` and read by ``parse_p2p_bandwidth_latency``.

Units as printed by nccl-tests: time in µs, bandwidth in GB/s (1e9 B/s).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
from dataclasses import dataclass
from typing import Mapping, Sequence

from .procs import KILL_GRACE_S, BenchTimeout, run_child, tail

__all__ = [
    "BenchTimeout", "NcclTestsParseError", "NcclTestsRunError", "P2PParseError",
    "Result", "NcclTestsRow", "NcclTestsResult", "P2PBandwidthLatency",
    "parse_nccl_tests", "parse_nccl_tests_all", "render_nccl_tests", "parse_p2p_bandwidth_latency",
    "all_reduce_perf_argv", "run_all_reduce_perf", "find_all_reduce_perf",
]


class NcclTestsParseError(ValueError):
    """The text holds no nccl-tests result table; the message is one line saying why."""


class NcclTestsRunError(RuntimeError):
    """The benchmark ran but gave no result (non-zero exit, or no table); the message ends with the
    tail of its output."""


class P2PParseError(ValueError):
    """The text holds no p2pBandwidthLatencyTest matrix."""


# --------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Result:
    """One placement (out-of-place or in-place) of one row. ``None``: not printed (``N/A``, cut off)."""

    time_us: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    # ``#wrong``: elements that failed the check; None when not checked (``N/A``, or -1 in forks that
    # print it so) and in old outputs, whose column is a max deviation, kept in ``error``.
    wrong: int | None = None
    error: float | None = None

    def to_json(self) -> dict:
        return {"time_us": self.time_us, "algbw_gbps": self.algbw_gbps, "busbw_gbps": self.busbw_gbps,
                "wrong": self.wrong, "error": self.error}


@dataclass(frozen=True)
class NcclTestsRow:
    size_bytes: int
    count: int | None = None
    type: str | None = None
    redop: str | None = None
    root: int | None = None
    out_of_place: Result | None = None
    in_place: Result | None = None

    def results(self) -> tuple[Result, ...]:
        return tuple(r for r in (self.out_of_place, self.in_place) if r is not None)

    def to_json(self) -> dict:
        return {"size_bytes": self.size_bytes, "count": self.count, "type": self.type, "redop": self.redop,
                "root": self.root,
                "out_of_place": self.out_of_place.to_json() if self.out_of_place else None,
                "in_place": self.in_place.to_json() if self.in_place else None}


@dataclass(frozen=True)
class NcclTestsResult:
    collective: str | None  # "all_reduce" for all_reduce_perf; None when the text never names it
    rows: tuple[NcclTestsRow, ...]
    avg_busbw_gbps: float | None = None  # "# Avg bus bandwidth" as printed (mean over every cell)
    out_of_bounds: int | None = None  # "# Out of bounds values : N"
    # nccl-tests' own verdict: False when a summary line says FAILED or a row has #wrong > 0, True when
    # the summary says OK, None when no summary line was read.
    ok: bool | None = None
    nranks: int | None = None  # from the "#  Rank N ..." device lines, else NCCL's "nranks N"
    warnings: tuple[str, ...] = ()
    # Its verdict on the data alone: ``ok`` less the "Avg bus bandwidth ... FAILED" of NCCL_TESTS_MIN_BW,
    # which judges the figure, not the data (src/util.cu writeResultFooter).
    data_ok: bool | None = None

    def wrong_data(self) -> str | None:
        """What nccl-tests itself found wrong in the data -- ``#wrong`` of either placement, a FAILED
        ``Out of bounds values : N`` line (N: the checks that found wrong elements, src/common.cu
        CheckData) -- or None when nothing was."""
        if self.data_ok is not False:
            return None
        wrong = {place: sum((getattr(row, place).wrong or 0) for row in self.rows if getattr(row, place))
                 for place in ("out_of_place", "in_place")}
        found = [f"{n} wrong elements {place.replace('_', '-')}" for place, n in wrong.items() if n]
        if self.out_of_bounds:
            found.append(f"'Out of bounds values : {self.out_of_bounds} FAILED'")
        return "nccl-tests reported " + (", ".join(found) if found else "FAILED")

    def max_busbw_gbps(self) -> float | None:
        values = [r.busbw_gbps for row in self.rows for r in row.results() if r.busbw_gbps is not None]
        return max(values) if values else None

    def to_json(self) -> dict:
        return {"collective": self.collective, "nranks": self.nranks,
                "rows": [row.to_json() for row in self.rows],
                "avg_busbw_gbps": self.avg_busbw_gbps, "max_busbw_gbps": self.max_busbw_gbps(),
                "out_of_bounds": self.out_of_bounds, "ok": self.ok, "data_ok": self.data_ok,
                "warnings": list(self.warnings)}


# ---------------------------------------------------------------------------------------- tokens

_INT_RE = re.compile(r"[+-]?\d{1,19}")  # 19 digits: every real count fits; int() never sees a huge string
_FLOAT_RE = re.compile(r"[+-]?(?:\d{1,30}(?:\.\d{0,30})?|\.\d{1,30})(?:[eE][+-]?\d{1,4})?")
_NAN_RE = re.compile(r"[+-]?(?:nan|inf)", re.IGNORECASE)  # printf of a 0/0 or x/0
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
_NA = "N/A"


class _Bad(Exception):
    """A token that is not of its column's kind."""


def _int(tok: str) -> int:
    if not _INT_RE.fullmatch(tok):
        raise _Bad(tok)
    return int(tok)


def _float(tok: str, notes: list[str]) -> float | None:
    if tok == _NA:
        return None
    if _NAN_RE.fullmatch(tok):
        notes.append(f"a cell reads {tok!r}; read as not printed")
        return None
    if not _FLOAT_RE.fullmatch(tok):
        raise _Bad(tok)
    value = float(tok)
    if not math.isfinite(value):
        notes.append(f"a cell reads {tok!r}; read as not printed")
        return None
    return value


def _count(tok: str, notes: list[str]) -> int | None:
    """A ``#wrong`` cell: printed with ``%6g`` (src/util.cu writeBenchmarkLineBody), so a count from
    a million up reads like ``1.04858e+06``; None when not checked (``N/A``, -1)."""
    if tok == _NA:
        return None
    if _INT_RE.fullmatch(tok):
        return int(tok) if int(tok) >= 0 else None
    value = _float(tok, notes)
    return None if value is None or value < 0 else round(value)


def _ident(tok: str) -> str:
    if not _IDENT_RE.fullmatch(tok):
        raise _Bad(tok)
    return tok


# --------------------------------------------------------------------------------------- columns

_PREFIX = ("size", "count", "type", "redop", "root")
_ALIASES = {"bytes": "size", "N": "count", "op": "redop", "res": "error", "cputime": "time"}


@dataclass(frozen=True)
class _Layout:
    prefix: tuple[str, ...]  # a subsequence of _PREFIX, starting with "size"
    groups: tuple[tuple[str, ...], ...]  # one or two groups of cell names; unknown names are skipped

    @property
    def width(self) -> int:
        return len(self.prefix) + sum(len(g) for g in self.groups)


def _header_layout(body: str) -> _Layout | None:
    """The layout named by a column-header line (its text after the '#'), or None if it is not one."""
    names = [_ALIASES.get(t, t) for t in body.split()]
    if not names or names[0] != "size" or "time" not in names or "busbw" not in names:
        return None
    cut = names.index("time")
    prefix = tuple(names[:cut])
    if any(p not in _PREFIX for p in prefix) or list(prefix) != [p for p in _PREFIX if p in prefix]:
        return None
    groups: list[list[str]] = []
    for name in names[cut:]:
        if name == "time":
            groups.append([])
        groups[-1].append(name)
    # Only the first two groups are placements; a later "time" would be a column we do not know.
    return _Layout(prefix, tuple(tuple(g) for g in groups[:2]))


def _guess_layout(tokens: Sequence[str]) -> _Layout | None:
    """A layout for a row seen before any column header (the header was cut off): the prefix is read
    off the token kinds, then one or two complete groups of four cells."""
    try:
        _int(tokens[0]), _int(tokens[1]), _ident(tokens[2])
    except (_Bad, IndexError):
        return None
    prefix = ["size", "count", "type"]
    rest = list(tokens[3:])
    if rest and _IDENT_RE.fullmatch(rest[0]) and not _NAN_RE.fullmatch(rest[0]):
        prefix.append("redop")
        rest = rest[1:]
    if len(rest) in (5, 9) and _INT_RE.fullmatch(rest[0]):  # a root column before 1 or 2 groups
        prefix.append("root")
        rest = rest[1:]
    if len(rest) not in (4, 8):
        return None
    # The fourth cell tells the format: a count (#wrong) or a deviation like 2e-07 (error).
    last = "#wrong" if (_INT_RE.fullmatch(rest[3]) or rest[3] == _NA) else "error"
    group = ("time", "algbw", "busbw", last)
    return _Layout(tuple(prefix), (group,) * (len(rest) // 4))


def _parse_row(tokens: Sequence[str], layout: _Layout, notes: list[str]) -> NcclTestsRow | None:
    """The row these tokens make under ``layout``; None when they are not a row. A row cut short, or
    interrupted by other output, keeps the cells before the break (and says so in ``notes``)."""
    if len(tokens) < len(layout.prefix):
        return None
    fields: dict = {}
    try:
        for name, tok in zip(layout.prefix, tokens):
            fields[name] = _ident(tok) if name in ("type", "redop") else _int(tok)
    except _Bad:
        return None
    if fields["size"] < 0 or fields.get("count", 0) < 0:
        return None
    cells = list(tokens[len(layout.prefix):])
    results: list[Result | None] = []
    broken = False
    for group in layout.groups:
        values: dict = {}
        for name in group:
            if broken or not cells:
                broken = True
                break
            tok = cells.pop(0)
            try:
                if name in ("time", "algbw", "busbw"):
                    values[name] = _float(tok, notes)
                elif name == "#wrong":
                    values["wrong"] = _count(tok, notes)
                elif name == "error":
                    # Old versions mark a deviation above their threshold with '*'.
                    if tok.endswith("*"):
                        notes.append(f"size {fields['size']}: error {tok} is above nccl-tests' threshold")
                    values["error"] = _float(tok.rstrip("*"), notes)
                elif tok != _NA and (name.startswith(("#", "i_"))):
                    _float(tok, notes)  # a numeric extra column (#bitdiff, i_min, ...): checked, skipped
            except _Bad:
                broken = True
                break
        results.append(Result(time_us=values.get("time"), algbw_gbps=values.get("algbw"),
                              busbw_gbps=values.get("busbw"), wrong=values.get("wrong"),
                              error=values.get("error")) if values else None)
    if not any(results):
        notes.append(f"a row for size {fields['size']} has no results (cut short?); left out")
        return None
    if broken:
        notes.append(f"the row for size {fields['size']} is cut short or interrupted; its missing cells "
                     f"are None")
    results += [None] * (2 - len(results))
    return NcclTestsRow(size_bytes=fields["size"], count=fields.get("count"), type=fields.get("type"),
                        redop=fields.get("redop"), root=fields.get("root"),
                        out_of_place=results[0], in_place=results[1])


# ----------------------------------------------------------------------------------------- lines

# Prefixes that launchers put before each line: Open MPI --tag-output "[1,0]<stdout>:", then srun
# --label "0: " or pdsh/clush "host: ". NCCL INFO lines ("host:pid:tid [d] ...") do not match ": ".
_TAG_RE = re.compile(r"^\s*\[\d+,\d+\]<std(?:out|err)>:")
_LABEL_RE = re.compile(r"^\s*[\w.-]{1,64}: ")
_RANK_RE = re.compile(r"^Rank\s+(\d{1,9})\s+(?:Group|Pid|uses)\b")
_NRANKS_RE = re.compile(r"\bnranks (\d{1,6})\b")
_OOB_RE = re.compile(r"^Out of bounds values\s*:\s*(\d{1,19})\s*(OK|FAILED)?")
_AVG_RE = re.compile(r"^Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?")
_BITWISE_RE = re.compile(r"^Bitwise mismatches\s*:\s*(\d{1,19})\s*(OK|FAILED)?")
_CONCLUDED_RE = re.compile(r"^Collective test (?:starting|concluded):\s*(\S+)")
_RUN_START_RE = re.compile(r"^(?:nThread\s|nccl-tests version\s|Collective test starting:)")
# A command line (or "# Collective test ...: x_perf") naming the binary: .../all_reduce_perf[_mpi]
_BINARY_RE = re.compile(r"(?:^|[\s/])([a-z][a-z0-9_]{0,40}?)_perf(?:_mpi)?(?=\s|$)")


def _clean(line: str) -> str:
    line = _TAG_RE.sub("", line, count=1)
    line = _LABEL_RE.sub("", line, count=1)
    return line.strip()


def _collective(text: str) -> str | None:
    m = _BINARY_RE.search(text)
    return m.group(1) if m else None


class _Table:
    """What one run's section of the text says, gathered line by line."""

    def __init__(self) -> None:
        self.layout: _Layout | None = None
        self.guessed = False
        self.rows: list[NcclTestsRow] = []
        self.notes: list[str] = []
        self.collective: str | None = None
        self.ranks: set[int] = set()
        self.info_nranks: int | None = None
        self.avg: float | None = None
        self.oob: int | None = None
        self.verdicts: list[bool] = []  # each OK/FAILED printed on a summary line
        self.data_verdicts: list[bool] = []  # those that judge the data (not the average's)
        self.summary = False

    @property
    def started(self) -> bool:
        return bool(self.rows) or self.summary

    def result(self) -> NcclTestsResult:
        notes = list(dict.fromkeys(self.notes))  # each reason once, in order
        nranks = len(self.ranks) if self.ranks else self.info_nranks
        if self.ranks and self.info_nranks is not None and self.info_nranks != len(self.ranks):
            notes.append(f"the device lines list {len(self.ranks)} ranks but NCCL reports nranks "
                         f"{self.info_nranks}; the device lines are used")
        if not self.summary:
            notes.append("no summary lines ('# Out of bounds values', '# Avg bus bandwidth'): the text "
                         "ends before the run did")
        if any(r.error is not None for row in self.rows for r in row.results()):
            notes.append("old nccl-tests format: its 'error' column is a max deviation, not a count of "
                         "wrong elements, so 'wrong' is None; the 'Out of bounds values' line is the verdict")
        rows_ok = [False] if any(r.wrong for row in self.rows for r in row.results()) else []
        verdicts, data_verdicts = self.verdicts + rows_ok, self.data_verdicts + rows_ok
        return NcclTestsResult(collective=self.collective, rows=tuple(self.rows), avg_busbw_gbps=self.avg,
                               out_of_bounds=self.oob, ok=all(verdicts) if verdicts else None, nranks=nranks,
                               warnings=tuple(notes), data_ok=all(data_verdicts) if data_verdicts else None)


def parse_nccl_tests_all(text: str) -> tuple[NcclTestsResult, ...]:
    """Every run found in ``text`` (several runs pasted into one log give several), in order."""
    if not isinstance(text, str):
        raise NcclTestsParseError(f"expected the text of an nccl-tests run, got {type(text).__name__}")
    lines = text.splitlines()
    unterminated = bool(lines) and not text.endswith(("\n", "\r"))
    tables = [_Table()]
    for index, raw in enumerate(lines):
        cur = tables[-1]
        line = _clean(raw)
        if line.startswith("#"):
            body = line[1:].strip()
            layout = _header_layout(body)
            if layout is not None or _RUN_START_RE.match(body):
                if cur.started:
                    tables.append(_Table())
                    cur = tables[-1]
                if layout is not None:
                    cur.layout, cur.guessed = layout, False
            if m := _RANK_RE.match(body):
                cur.ranks.add(int(m.group(1)))
            elif m := _CONCLUDED_RE.match(body):
                cur.collective = _collective(" " + m.group(1)) or cur.collective
            elif m := _OOB_RE.match(body):
                cur.oob, cur.summary = int(m.group(1)), True
                cur.verdicts.append(m.group(2) != "FAILED" and cur.oob == 0)
                cur.data_verdicts.append(cur.verdicts[-1])
            elif m := _BITWISE_RE.match(body):
                cur.verdicts.append(m.group(2) != "FAILED" and int(m.group(1)) == 0)
                cur.data_verdicts.append(cur.verdicts[-1])
            elif m := _AVG_RE.match(body):
                cur.summary = True
                try:
                    cur.avg = _float(m.group(1), cur.notes)
                except _Bad:
                    cur.notes.append(f"the 'Avg bus bandwidth' value {m.group(1)!r} is not a number")
                if m.group(2):
                    cur.verdicts.append(m.group(2) == "OK")
                elif unterminated and index == len(lines) - 1 and cur.avg is not None:
                    cur.notes.append("the text ends on the 'Avg bus bandwidth' line without a newline: "
                                     "its value may be cut short")
            continue
        tokens = line.split()
        if not tokens:
            continue
        target = cur
        if cur.summary:  # a row after a summary belongs to a next run whose header we did not see
            target = _Table()
            target.layout, target.guessed = cur.layout, True
        last = unterminated and index == len(lines) - 1
        row = _parse_last_row(tokens, target) if last else _row_in(tokens, target)
        if row is not None:
            if target is not cur:
                tables.append(target)
                cur = target
            cur.rows.append(row)
            continue
        if "NCCL INFO" in line:
            if m := _NRANKS_RE.search(line):
                cur.info_nranks = max(cur.info_nranks or 0, int(m.group(1)))
        elif name := _collective(line):
            # A command line: after a finished run, it starts the next one.
            if cur.started:
                tables.append(_Table())
                cur = tables[-1]
            cur.collective = name
    found = tuple(t.result() for t in tables if t.rows)
    if not found:
        raise NcclTestsParseError(_no_table_reason(text, tables))
    return found


def _row_in(tokens: Sequence[str], table: _Table) -> NcclTestsRow | None:
    """The row ``tokens`` make in ``table``: under its header's layout, else under a layout inferred
    from the row (kept while later rows fit it)."""
    if table.layout is not None:
        row = _parse_row(tokens, table.layout, table.notes)
        if row is not None or not table.guessed:
            return row
    guess = _guess_layout(tokens)
    if guess is None:
        return None
    if table.layout is None:
        table.notes.append("no column header before the rows (cut off?): columns inferred from the rows")
    table.layout, table.guessed = guess, True
    return _parse_row(tokens, guess, table.notes)


def _parse_last_row(tokens: Sequence[str], table: _Table) -> NcclTestsRow | None:
    # The text's last line has no newline: it was cut, most likely mid-line (nccl-tests never ends on a
    # row: its summary follows). A row there loses its last token, which may be a partial number
    # ("2" of "2e-07"); its layout is the one the rows before it had.
    if table.layout is None:
        return None
    row = _parse_row(tokens[:-1], table.layout, table.notes)
    if row is not None:
        table.notes.append(f"the text ends inside the row for size {row.size_bytes}: its last cell is "
                           f"dropped")
    return row


def _no_table_reason(text: str, tables: Sequence[_Table]) -> str:
    if _looks_like_p2p(text):
        return ("this is p2pBandwidthLatencyTest output (cuda-samples), not nccl-tests: read it with "
                "parse_p2p_bandwidth_latency")
    if any(t.layout is not None and not t.guessed for t in tables):
        return "nccl-tests column header found, but no result row under it (the text ends first?)"
    if any(t.summary for t in tables):
        return "nccl-tests summary lines found, but no result table"
    return "no nccl-tests result table (no '#  size  count ... busbw' header or result rows) in the text"


def parse_nccl_tests(text: str) -> NcclTestsResult:
    """The (first) run in ``text``. Raises ``NcclTestsParseError`` when there is no result table."""
    runs = parse_nccl_tests_all(text)
    first = runs[0]
    if len(runs) > 1:
        note = f"the text holds {len(runs)} runs; only the first was read (parse_nccl_tests_all reads all)"
        first = dataclasses.replace(first, warnings=first.warnings + (note,))
    return first


def render_nccl_tests(result: NcclTestsResult) -> str:
    """The text nccl-tests (2.x, stdout) prints for ``result``'s table and summary: the inverse of
    ``parse_nccl_tests`` for what the table shows (time, algbw and busbw rounded as nccl-tests does;
    an old-format ``error`` is not shown). For test fixtures and reports, never as a measurement."""
    def cell(value, fmt: str, width: int) -> str:
        return f"{_NA:>{width}}" if value is None else format(value, f">{width}{fmt}")

    def time_cell(t):  # nccl-tests shortens the time to 7 characters
        return cell(t, ".0f" if t is not None and t >= 10000 else ".1f" if t is not None and t >= 100
                    else ".2f", 7)

    out = [] if result.collective is None else [f"# Collective test starting: {result.collective}_perf"]
    out += [f"#  Rank {r:2d} Group  0 Pid      1 on  localhost device {r:2d} [0000:00:00] GPU"
            for r in range(result.nranks or 0)]
    out += ["#",
            "#                                                              out-of-place                       in-place",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
    for row in result.rows:
        if row.count is None or row.type is None or row.redop is None or row.root is None:
            raise ValueError(f"render_nccl_tests: the row for size {row.size_bytes} lacks count, type, "
                             f"redop or root, which the modern table always prints")
        line = f"{row.size_bytes:12d}  {row.count:12d}  {row.type:>8}  {row.redop:>6}  {row.root:6d}"
        for res in (row.out_of_place or Result(), row.in_place or Result()):
            line += (f"  {time_cell(res.time_us)}  {cell(res.algbw_gbps, '.2f', 6)}  "
                     f"{cell(res.busbw_gbps, '.2f', 6)}  {cell(res.wrong, 'd', 5)}")
        out.append(line)
    if result.out_of_bounds is not None:
        out.append(f"# Out of bounds values : {result.out_of_bounds} "
                   f"{'FAILED' if result.out_of_bounds else 'OK'}")
    if result.avg_busbw_gbps is not None:
        out.append(f"# Avg bus bandwidth    : {result.avg_busbw_gbps:g} ")
    out.append("#")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------ p2pBandwidthLatencyTest

_P2P_MARKERS = ("p2pBandwidthLatencyTest", "P2P=Enabled", "P2P=Disabled", "P2P Connectivity Matrix",
                "D\\D", "P2P (Peer-to-Peer) GPU Bandwidth Latency Test")


def _looks_like_p2p(text: str) -> bool:
    return any(marker in text for marker in _P2P_MARKERS)


@dataclass(frozen=True)
class P2PBandwidthLatency:
    """The matrices of a p2pBandwidthLatencyTest run, keyed by their title as printed (e.g.
    ``"Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)"``; a latency matrix's CPU half gets
    ``" [CPU]"`` appended). ``matrix[i][j]``: from GPU i (row) to GPU j (column); None = not printed."""

    matrices: Mapping[str, tuple[tuple[float | None, ...], ...]]
    warnings: tuple[str, ...] = ()

    @property
    def n_gpus(self) -> int:
        return max((len(m) for m in self.matrices.values()), default=0)

    def _cells(self, title: str, diagonal: bool) -> list[float]:
        m = self.matrices[title]
        return [v for i, row in enumerate(m) for j, v in enumerate(row) if v is not None and (i == j) == diagonal]

    def offdiag_max(self, title: str) -> float | None:
        return max(self._cells(title, False), default=None)

    def offdiag_min(self, title: str) -> float | None:
        return min(self._cells(title, False), default=None)

    def diag_max(self, title: str) -> float | None:
        return max(self._cells(title, True), default=None)


_P2P_HEAD = {"D\\D": "", "GPU": "", "CPU": " [CPU]"}


def parse_p2p_bandwidth_latency(text: str) -> P2PBandwidthLatency:
    """The matrices of ``p2pBandwidthLatencyTest`` output: a title line, a head row (``D\\D``, or
    ``GPU``/``CPU`` for latency) numbering the GPUs, then one row per GPU. Cut rows keep what they
    have; raises ``P2PParseError`` when there is no matrix at all."""
    if not isinstance(text, str):
        raise P2PParseError(f"expected the text of a p2pBandwidthLatencyTest run, got {type(text).__name__}")
    matrices: dict[str, list[list[float | None]]] = {}
    notes: list[str] = []
    title: str | None = None
    key: str | None = None
    width = 0
    for raw in text.splitlines():
        tokens = raw.split()
        if not tokens:
            continue
        if tokens[0] in _P2P_HEAD and all(_INT_RE.fullmatch(t) for t in tokens[1:]) and len(tokens) > 1:
            key = (title or "untitled matrix") + _P2P_HEAD[tokens[0]]
            width = len(tokens) - 1
            if key in matrices:
                notes.append(f"{key!r} appears twice; the last one is kept")
            matrices[key] = []
            continue
        if key is not None and _INT_RE.fullmatch(tokens[0]):
            values: list[float | None] = []
            try:
                for tok in tokens[1:1 + width]:
                    values.append(_float(tok, notes))
            except _Bad:
                pass
            if len(values) < width:
                notes.append(f"{key!r}: row {tokens[0]} has {len(values)} of {width} values")
                values += [None] * (width - len(values))
            matrices[key].append(values)
            continue
        key = None
        if "Matrix" in raw:
            title = " ".join(tokens)
    if not any(matrices.values()):
        raise P2PParseError("no p2pBandwidthLatencyTest matrix (a 'D\\D' head row and GPU rows) in the text")
    return P2PBandwidthLatency({k: tuple(tuple(r) for r in v) for k, v in matrices.items() if v},
                               tuple(dict.fromkeys(notes)))


# ----------------------------------------------------------------------------------------- runner

BINARY = "all_reduce_perf"
TEST_NUM_RESULTS = 7  # nccl-tests' exit status for errors or low bandwidth (src/common.h testResult_t)
# DCGM's nccl_tests plugin reads DCGM_NCCL_TESTS_BIN_PATH (a directory holding all_reduce_perf); we
# accept the same, and the shorter NCCL_TESTS_BIN_PATH first.
BIN_PATH_VARS = ("NCCL_TESTS_BIN_PATH", "DCGM_NCCL_TESTS_BIN_PATH")


def find_all_reduce_perf(environ: Mapping[str, str]) -> str | None:
    """Where ``all_reduce_perf`` is: ``$NCCL_TESTS_BIN_PATH``/``$DCGM_NCCL_TESTS_BIN_PATH`` (a folder),
    else on ``environ['PATH']``. ``environ`` comes from runtime.py, the one reader of os.environ."""
    for var in BIN_PATH_VARS:
        folder = environ.get(var)
        if folder:
            candidate = os.path.join(folder, BINARY)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    path = environ.get("PATH")
    # With no PATH we do not search: shutil.which would fall back to os.environ (or the cwd).
    return shutil.which(BINARY, path=path) if path else None


def all_reduce_perf_argv(binary: str, n_gpus: int, size_bytes: int, *, iters: int = 20,
                         warmup: int = 5) -> list[str]:
    """One size (-b = -e), n_gpus GPUs in this one process (-g), iters timed (-n) after warmup (-w)
    iterations, one check iteration (-c 1) so that #wrong is counted."""
    for name, value, low in (("n_gpus", n_gpus, 1), ("size_bytes", size_bytes, 1), ("iters", iters, 1),
                             ("warmup", warmup, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"all_reduce_perf: {name} must be an integer >= {low}, got {value!r}")
    return [binary, "-b", str(size_bytes), "-e", str(size_bytes), "-f", "2", "-g", str(n_gpus),
            "-n", str(iters), "-w", str(warmup), "-c", "1"]


def run_all_reduce_perf(binary: str, n_gpus: int, size_bytes: int, *, iters: int = 20, warmup: int = 5,
                        timeout_s: float, env: Mapping[str, str] | None = None,
                        grace_s: float = KILL_GRACE_S) -> NcclTestsResult:
    """Run ``all_reduce_perf`` at one size and parse its table.

    ``env`` is the child's complete environment (runtime.py builds it); None inherits ours. The child
    leads its own process group, so a timeout kills it and everything it started: ``BenchTimeout``.
    A non-zero exit (except nccl-tests' own verdict on a finished run: wrong data or a low average,
    status 7 after the summary), or output with no table, raises ``NcclTestsRunError`` with the
    output's tail."""
    argv = all_reduce_perf_argv(binary, n_gpus, size_bytes, iters=iters, warmup=warmup)
    command = " ".join(argv)
    try:
        status, output = run_child(argv, timeout_s=timeout_s, env=env, grace_s=grace_s, reap=True)
    except OSError as exc:
        raise NcclTestsRunError(f"cannot start {command}: {exc}") from exc
    try:
        result = parse_nccl_tests(output)
    except NcclTestsParseError as exc:
        if status != 0:
            raise NcclTestsRunError(f"{command} exited with status {status}:\n{tail(output)}") from None
        raise NcclTestsRunError(f"{command}: {exc}:\n{tail(output)}") from exc
    if status == 0:
        return result
    # A finished run whose data were wrong (or whose average missed NCCL_TESTS_MIN_BW) exits with
    # testNumResults after its summary (src/common.cu run() and main's TESTCHECK): that table is the
    # result, wrong data included -- a broken node, not a run without a figure.
    if status == TEST_NUM_RESULTS and result.out_of_bounds is not None:
        return dataclasses.replace(result, warnings=result.warnings + (
            f"{command} exited with status {status} (nccl-tests: wrong data or below NCCL_TESTS_MIN_BW)",))
    raise NcclTestsRunError(f"{command} exited with status {status}:\n{tail(output)}")


