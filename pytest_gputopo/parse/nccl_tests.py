"""nccl-tests: read the result table of ``all_reduce_perf`` and its siblings.

The table is read by its own column header, because the columns changed over the years:
``size count type redop root`` (some tests and old versions drop ``redop`` or ``root``; the oldest
say ``bytes N type op``), then one group per placement -- ``time algbw busbw #wrong`` (old versions:
``error``/``res``, a max deviation such as ``2e-07`` instead of a count) -- out-of-place first, in-place
second (some old tests print only one), with optional extra columns (``#bitdiff``, ``i_min`` ...,
``timestamp``) that are skipped. Real logs interleave NCCL INFO lines, MPI/srun prefixes and prompts,
and published copies are often cut short; whatever can be read is returned and what could not is a
warning. Text with no result table at all raises ``NcclTestsParseError``; nothing else is raised.

``p2pBandwidthLatencyTest`` (cuda-samples) output often travels with nccl-tests output; it is
recognised and refused by ``parse_nccl_tests`` and read by ``parse.cuda_samples``.

Units as printed by nccl-tests: time in µs, bandwidth in GB/s (1e9 B/s).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.units import counted
from .cells import IDENT_RE, INT_RE, NA, NAN_RE, BadCell, cell_count, cell_float, cell_ident, cell_int
from .which_tool import refusal

__all__ = [
    "NcclTestsParseError",
    "Result",
    "NcclTestsRow",
    "NcclTestsResult",
    "parse_nccl_tests",
    "parse_nccl_tests_all",
]


class NcclTestsParseError(ValueError):
    """The text holds no nccl-tests result table; the message is one line saying why."""


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

    def to_json(self) -> dict[str, Any]:
        return {
            "time_us": self.time_us,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "wrong": self.wrong,
            "error": self.error,
        }


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

    def to_json(self) -> dict[str, Any]:
        return {
            "size_bytes": self.size_bytes,
            "count": self.count,
            "type": self.type,
            "redop": self.redop,
            "root": self.root,
            "out_of_place": self.out_of_place.to_json() if self.out_of_place else None,
            "in_place": self.in_place.to_json() if self.in_place else None,
        }


@dataclass(frozen=True)
class NcclTestsResult:
    collective: str | None  # "all_reduce" for all_reduce_perf; None when the text never names it
    rows: tuple[NcclTestsRow, ...]
    avg_busbw_gbps: float | None = None  # "# Avg bus bandwidth" as printed (mean over every cell)
    # "# Out of bounds values : N": the data checks that found wrong elements, not elements (#wrong)
    # nor rows. Each checking thread -- one per process unless -t -- adds 1 per row and placement when
    # the GPUs it checks (-g of them) held a wrong element; run() sums over threads and processes
    # (src/common.cu CheckData and run(), tags v2.13.9 and v2.19.6). So one process with -g 8 counts
    # at most 1 per row and placement, mpirun -np 8 up to 8.
    out_of_bounds: int | None = None
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
        ``Out of bounds values : N`` line (N: the checks that found wrong elements, see
        ``out_of_bounds``) -- or None when nothing was."""
        if self.data_ok is not False:
            return None
        wrong = {
            place: sum((getattr(row, place).wrong or 0) for row in self.rows if getattr(row, place))
            for place in ("out_of_place", "in_place")
        }
        found = [f"{n} wrong elements {place.replace('_', '-')}" for place, n in wrong.items() if n]
        if self.out_of_bounds:
            found.append(f"'Out of bounds values : {self.out_of_bounds} FAILED'")
        return "nccl-tests reported " + (", ".join(found) if found else "FAILED")

    def max_busbw_gbps(self) -> float | None:
        values = [r.busbw_gbps for row in self.rows for r in row.results() if r.busbw_gbps is not None]
        return max(values) if values else None

    def to_json(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "nranks": self.nranks,
            "rows": [row.to_json() for row in self.rows],
            "avg_busbw_gbps": self.avg_busbw_gbps,
            "max_busbw_gbps": self.max_busbw_gbps(),
            "out_of_bounds": self.out_of_bounds,
            "ok": self.ok,
            "data_ok": self.data_ok,
            "warnings": list(self.warnings),
        }


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
        cell_int(tokens[0]), cell_int(tokens[1]), cell_ident(tokens[2])
    except (BadCell, IndexError):
        return None
    prefix = ["size", "count", "type"]
    rest = list(tokens[3:])
    if rest and IDENT_RE.fullmatch(rest[0]) and not NAN_RE.fullmatch(rest[0]):
        prefix.append("redop")
        rest = rest[1:]
    if len(rest) in (5, 9) and INT_RE.fullmatch(rest[0]):  # a root column before 1 or 2 groups
        prefix.append("root")
        rest = rest[1:]
    if len(rest) not in (4, 8):
        return None
    # The fourth cell tells the format: a count (#wrong) or a deviation like 2e-07 (error).
    last = "#wrong" if (INT_RE.fullmatch(rest[3]) or rest[3] == NA) else "error"
    group = ("time", "algbw", "busbw", last)
    return _Layout(tuple(prefix), (group,) * (len(rest) // 4))


def _parse_row(tokens: Sequence[str], layout: _Layout, notes: list[str]) -> NcclTestsRow | None:
    """The row these tokens make under ``layout``; None when they are not a row. A row cut short, or
    interrupted by other output, keeps the cells before the break (and says so in ``notes``)."""
    if len(tokens) < len(layout.prefix):
        return None
    fields: dict[str, Any] = {}
    try:
        for name, tok in zip(layout.prefix, tokens, strict=False):  # the tokens after the prefix are figures
            fields[name] = cell_ident(tok) if name in ("type", "redop") else cell_int(tok)
    except BadCell:
        return None
    if fields["size"] < 0 or fields.get("count", 0) < 0:
        return None
    cells = list(tokens[len(layout.prefix) :])
    results: list[Result | None] = []
    broken = False
    for group in layout.groups:
        values: dict[str, Any] = {}
        for name in group:
            if broken or not cells:
                broken = True
                break
            tok = cells.pop(0)
            try:
                if name in ("time", "algbw", "busbw"):
                    values[name] = cell_float(tok, notes)
                elif name == "#wrong":
                    values["wrong"] = cell_count(tok, notes)
                elif name == "error":
                    # Old versions mark a deviation above their threshold with '*'.
                    if tok.endswith("*"):
                        notes.append(f"size {fields['size']}: error {tok} is above nccl-tests' threshold")
                    values["error"] = cell_float(tok.rstrip("*"), notes)
                elif tok != NA and (name.startswith(("#", "i_"))):
                    cell_float(tok, notes)  # a numeric extra column (#bitdiff, i_min, ...): checked, skipped
            except BadCell:
                broken = True
                break
        results.append(
            Result(
                time_us=values.get("time"),
                algbw_gbps=values.get("algbw"),
                busbw_gbps=values.get("busbw"),
                wrong=values.get("wrong"),
                error=values.get("error"),
            )
            if values
            else None
        )
    if not any(results):
        notes.append(f"a row for size {fields['size']} has no results (cut short?); left out")
        return None
    if broken:
        notes.append(f"the row for size {fields['size']} is cut short or interrupted; its missing cells are None")
    results += [None] * (2 - len(results))
    return NcclTestsRow(
        size_bytes=fields["size"],
        count=fields.get("count"),
        type=fields.get("type"),
        redop=fields.get("redop"),
        root=fields.get("root"),
        out_of_place=results[0],
        in_place=results[1],
    )


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
            notes.append(
                f"the device lines list {counted(len(self.ranks), 'rank')} but NCCL reports nranks "
                f"{self.info_nranks}; the device lines are used"
            )
        if not self.summary:
            notes.append(
                "no summary lines ('# Out of bounds values', '# Avg bus bandwidth'): the text ends before the run did"
            )
        if any(r.error is not None for row in self.rows for r in row.results()):
            notes.append(
                "old nccl-tests format: its 'error' column is a max deviation, not a count of "
                "wrong elements, so 'wrong' is None; the 'Out of bounds values' line is the verdict"
            )
        rows_ok = [False] if any(r.wrong for row in self.rows for r in row.results()) else []
        verdicts, data_verdicts = self.verdicts + rows_ok, self.data_verdicts + rows_ok
        return NcclTestsResult(
            collective=self.collective,
            rows=tuple(self.rows),
            avg_busbw_gbps=self.avg,
            out_of_bounds=self.oob,
            ok=all(verdicts) if verdicts else None,
            nranks=nranks,
            warnings=tuple(notes),
            data_ok=all(data_verdicts) if data_verdicts else None,
        )


def parse_nccl_tests_all(text: str) -> tuple[NcclTestsResult, ...]:
    """Every run found in ``text`` (several runs pasted into one log give several), in order."""
    if not isinstance(text, str):
        raise NcclTestsParseError(f"expected the text of an nccl-tests run, got {type(text).__name__}")
    if why := refusal(text, "nccl-tests"):
        raise NcclTestsParseError(why)
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
                    cur.avg = cell_float(m.group(1), cur.notes)
                except BadCell:
                    cur.notes.append(f"the 'Avg bus bandwidth' value {m.group(1)!r} is not a number")
                if m.group(2):
                    cur.verdicts.append(m.group(2) == "OK")
                elif unterminated and index == len(lines) - 1 and cur.avg is not None:
                    cur.notes.append(
                        "the text ends on the 'Avg bus bandwidth' line without a newline: its value may be cut short"
                    )
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
        raise NcclTestsParseError(_no_table_reason(tables))
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
        table.notes.append(f"the text ends inside the row for size {row.size_bytes}: its last cell is dropped")
    return row


def _no_table_reason(tables: Sequence[_Table]) -> str:
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
