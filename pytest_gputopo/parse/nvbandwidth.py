"""NVIDIA ``nvbandwidth``: read the text it prints (not its ``--json`` output).

The rules come from its sources (v0.8: output.cpp, inline_common.h, nvbandwidth.cpp, testcases_*.cpp)
and published v0.10 runs:

- a header: ``nvbandwidth Version: v0.8``, ``Built from Git version: ...``, then ``CUDA Runtime
  Version: 12040`` and ``CUDA Driver Version: 12040`` (v0.8; both print the driver API's version,
  which overwrites the runtime's in main) or ``CUDA Runtime Version: 13.2 (13020)`` and ``CUDA Driver
  Version (API): 13.2 (13020)`` (v0.10), and ``Driver Version: 550.54.15``; then (v0.5 to v0.8) the
  host name and one ``Device 0: <name> (<domain>:<bus>:<device>)`` line per GPU, in lowercase hex
  (getDeviceDisplayInfo). v0.10 prints no Device lines.
- per testcase run: ``Running <key>.``, then per result matrix its description (``memcpy CE GPU(row)
  -> GPU(column) bandwidth (GB/s)``; latency ones end in ``(ns)``), the matrix as PeerValueMatrix's
  ``operator<<`` prints it -- a head row of column labels (``setw(10)``), then rows: a label, then
  cells in ``std::fixed`` with 2 decimals, or ``N/A`` where nothing was measured (the diagonal, a
  pair without peer access) -- a blank line, ``SUM <key> <sum>`` (or ``&&&& PERF <key> <sum> +GB/s``
  / `` -ns`` with ``--perfFormatter``) and a blank line. The stream stays in fixed mode, so sums print
  with 2 decimals too. Bidirectional testcases print three matrices, keyed ``<key>_read1``/``_read2``/
  ``_total`` (or ``_write1``/``_write2``/``_total``). Host<->device testcases have one row (``0``) and a
  column per GPU; multinode bisect rows are labelled ``0->4``.
- a testcase its filter rules out prints only ``Waived: `` -- without its name -- and no Running
  line; a failed one prints ``Error: <msg>`` after its Running line; an unknown testcase id prints
  ``ERROR: Testcase <id> not found!``. A failed CUDA/NVML call prints ``[CUDA_ERROR_...] ...`` and
  ends the run.
- also seen: ``COEFFICIENT_OF_VARIATION <key> <cv>`` (v0.10), ``MIN``/``MAX``/``AVG <key> <v>`` and
  per-sample lines (``--verbose``). From v0.6 every run ends with ``NOTE: The reported results may
  not reflect ...`` (printInfo; v0.5 printed another NOTE first): a run without it was cut short.

Published copies are cut short, mid-line too: whatever can be read is returned and what could not is a
warning. Text that holds no nvbandwidth output raises ``NvbandwidthParseError``; nothing else is raised.
Units as printed: GB/s (1e9 B/s) and ns.

Here: the result (``Nvbandwidth``), frozen from what ``parse.nvbandwidth_lines`` read line by line;
another tool's text is refused naming that tool (``parse.which_tool`` tells it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core.units import counted
from .nvbandwidth_lines import LineReader, ReadMatrix, title_unit
from .which_tool import refusal

__all__ = [
    "NvbandwidthParseError",
    "NvbMatrix",
    "NvbTestcase",
    "Nvbandwidth",
    "looks_like_nvbandwidth",
    "parse_nvbandwidth",
]


class NvbandwidthParseError(ValueError):
    """The text holds no nvbandwidth output; the message is one line saying why."""


def _finite(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


@dataclass(frozen=True)
class NvbMatrix:
    """One result matrix. ``cells[r][c]``: from ``rows[r]`` to ``columns[c]`` as the title says;
    None = ``N/A`` or not printed (cut text)."""

    key: str  # the SUM line's key; when no SUM line follows, the testcase's name
    title: str  # the description line as printed
    unit: str  # "GB/s", "ns", or "" -- the title's trailing parenthesis
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    cells: tuple[tuple[float | None, ...], ...]
    sum: float | None  # from the SUM (or &&&& PERF) line; None when absent

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "unit": self.unit,
            "rows": list(self.rows),
            "columns": list(self.columns),
            "cells": [[_finite(v) for v in row] for row in self.cells],
            "sum": _finite(self.sum),
        }


@dataclass(frozen=True)
class NvbTestcase:
    name: str  # "" for a waived testcase: nvbandwidth prints no name for it
    status: str  # "ran", "waived" or "error"
    message: str | None
    matrices: tuple[NvbMatrix, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "matrices": [m.to_json() for m in self.matrices],
        }


@dataclass(frozen=True)
class Nvbandwidth:
    version: str | None  # "v0.10.0"
    driver_version: str | None  # "595.71.05"
    cuda_runtime_version: str | None  # "13.2"
    devices: tuple[tuple[int, str, str | None], ...]  # (index, name, bus id as printed or None)
    testcases: tuple[NvbTestcase, ...]
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "driver_version": self.driver_version,
            "cuda_runtime_version": self.cuda_runtime_version,
            "devices": [{"index": i, "name": name, "bus_id": bus} for i, name, bus in self.devices],
            "testcases": [t.to_json() for t in self.testcases],
            "warnings": list(self.warnings),
        }


# ---------------------------------------------------------------------------------------- result

MAX_WARNINGS = 200  # a hostile text can name a new matrix per line: the list stays readable


def _frozen(m: ReadMatrix, name: str) -> NvbMatrix:
    return NvbMatrix(
        key=m.key if m.key is not None else name,
        title=m.title,
        unit=title_unit(m.title),
        rows=tuple(m.rows),
        columns=m.columns,
        cells=tuple(m.cells),
        sum=m.sum,
    )


def _result(reader: LineReader) -> Nvbandwidth:
    """What the reader gathered, frozen; what it lacks (a SUM line, a result after Running) warned."""
    testcases = []
    for tc in reader.testcases:
        if tc.running and tc.status == "ran" and not tc.matrices:
            # run() always ends in addTestcaseResults unless it throws (Error:) or the run dies.
            reader.notes.append(f"{tc.name}: no result after its Running line (cut short, or the run stopped?)")
        for m in tc.matrices:
            if not m.has_sum:
                reader.notes.append(f"{m.where}: no SUM line after it (cut short?)")
        testcases.append(NvbTestcase(tc.name, tc.status, tc.message, tuple(_frozen(m, tc.name) for m in tc.matrices)))
    notes = list(dict.fromkeys(reader.notes))
    if len(notes) > MAX_WARNINGS:
        notes[MAX_WARNINGS - 1 :] = [f"... and {counted(len(notes) - MAX_WARNINGS + 1, 'more warning')}"]
    return Nvbandwidth(
        version=reader.version,
        driver_version=reader.driver,
        cuda_runtime_version=reader.cuda,
        devices=tuple((i, name, bus) for i, (name, bus) in reader.devices.items()),
        testcases=tuple(testcases),
        warnings=tuple(notes),
    )


def _refusal(reader: LineReader) -> str:
    """Why a text that holds no other tool's output is no nvbandwidth output, in one line."""
    if reader.running_seen:
        return (
            "no 'nvbandwidth Version' line, and no result matrix after the 'Running <testcase>.' lines "
            "(the text ends first?)"
        )
    return (
        "no nvbandwidth output in the text: no 'nvbandwidth Version' line and no 'Running <testcase>.' "
        "line followed by a result matrix"
    )


def parse_nvbandwidth(text: str) -> Nvbandwidth:
    """Everything ``text`` says of an nvbandwidth run (several pasted runs are read as one, in
    order). Raises ``NvbandwidthParseError`` when it holds neither an ``nvbandwidth Version`` line nor
    a ``Running <testcase>.`` line followed by a matrix."""
    if not isinstance(text, str):
        raise NvbandwidthParseError(f"expected the text of an nvbandwidth run, got {type(text).__name__}")
    if why := refusal(text, "nvbandwidth"):
        raise NvbandwidthParseError(why)
    reader = LineReader()
    reader.read(text)
    if not reader.accepted():
        raise NvbandwidthParseError(_refusal(reader))
    return _result(reader)


def looks_like_nvbandwidth(text: str) -> bool:
    """True when ``parse_nvbandwidth`` reads ``text`` (any other argument: False)."""
    try:
        parse_nvbandwidth(text)
    except NvbandwidthParseError:
        return False
    return True
