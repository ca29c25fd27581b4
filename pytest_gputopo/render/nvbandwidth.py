"""nvbandwidth's own text for a result: the inverse of ``parse.nvbandwidth``, for test fixtures and
round-trip tests. A rendered text is never a measurement: it shows what the result holds."""

from __future__ import annotations

import re

from ..parse.cells import NA
from ..parse.nvbandwidth import Nvbandwidth, NvbMatrix

# printInfo (output.cpp): the paragraph that closes every run.
NOTE = (
    "NOTE: The reported results may not reflect the full capabilities of the platform.",
    "Performance can vary with software drivers, hardware clocks, and system topology.",
)

_VERSION_RE = re.compile(r"v?(\d{1,6})\.(\d{1,6})")
_CUDA_RE = re.compile(r"(\d{1,4})\.(\d{1,4})")


def _old_header(version: str | None) -> bool:
    """True for the v0.8-and-older header (``CUDA Runtime Version: 12040``); v0.10 prints ``13.2 (13020)``."""
    m = _VERSION_RE.match(version or "")
    return m is not None and (int(m.group(1)), int(m.group(2))) <= (0, 8)


def _cuda_lines(cuda: str, old: bool) -> list[str]:
    m = _CUDA_RE.fullmatch(cuda)
    if m is None:  # not a version nvbandwidth could print: shown as it is
        return [f"CUDA Runtime Version: {cuda}"]
    code = int(m.group(1)) * 1000 + int(m.group(2)) * 10  # cudaRuntimeGetVersion's encoding
    if old:
        return [f"CUDA Runtime Version: {code}", f"CUDA Driver Version: {code}"]
    return [f"CUDA Runtime Version: {cuda} ({code})", f"CUDA Driver Version (API): {cuda} ({code})"]


def render_matrix(matrix: NvbMatrix, perf_formatter: bool = False) -> list[str]:
    """The lines addTestcaseResults prints: the description, the matrix as PeerValueMatrix's
    ``operator<<`` writes it (std::fixed, 2 decimals, ``setw(10)`` cells), a blank line, the SUM line
    (the stream is still in fixed mode, so the sum has 2 decimals too) and a blank line."""
    # Without row labels set it prints the row number with setw(2) under 2 blank columns; with
    # labels (multinode bisect), the labels' width.
    numbered = matrix.rows == tuple(str(i) for i in range(len(matrix.rows)))
    width = 2 if numbered else max([2] + [len(label) for label in matrix.rows])
    lines = [matrix.title, " " * width + "".join(f"{c:>10}" for c in matrix.columns)]
    for label, row in zip(matrix.rows, matrix.cells, strict=True):
        lines.append(f"{label:>{width}}" + "".join(f"{NA:>10}" if v is None else f"{v:10.2f}" for v in row))
    lines.append("")
    if matrix.sum is not None:
        if perf_formatter:
            unit = " -ns" if matrix.unit == "ns" else " +GB/s"  # getUnitString (common.h)
            lines.append(f"&&&& PERF {matrix.key} {matrix.sum:.2f}{unit}")
        else:
            lines.append(f"SUM {matrix.key} {matrix.sum:.2f}")
    lines.append("")
    return lines


def render_nvbandwidth(result: Nvbandwidth, *, hostname: str = "localhost", perf_formatter: bool = False) -> str:
    """The text nvbandwidth prints for ``result`` -- for fixtures and tests, never a measurement: the
    version header (v0.8's or v0.10's, by ``result.version``), the host name and Device lines when
    devices are known, each testcase (``Running <key>.`` and its matrices; ``Waived: `` without a
    name; ``Error: <msg>`` after its matrices; ``ERROR: Testcase <id> not found!``) and the closing
    NOTE. ``perf_formatter``: the ``&&&& PERF`` lines of ``--perfFormatter`` instead of SUM lines.
    A matrix whose sum is None gets no SUM line, as in a cut text."""
    out: list[str] = []
    if result.version is not None:
        out += [f"nvbandwidth Version: {result.version}", f"Built from Git version: {result.version}", ""]
    if result.cuda_runtime_version is not None or result.driver_version is not None:
        if result.cuda_runtime_version is not None:
            out += _cuda_lines(result.cuda_runtime_version, _old_header(result.version))
        if result.driver_version is not None:
            out.append(f"Driver Version: {result.driver_version}")
        out.append("")
    if result.devices:
        out.append(hostname)
        out += [f"Device {i}: {name}" + (f" ({bus})" if bus is not None else "") for i, name, bus in result.devices]
        out.append("")
    for tc in result.testcases:
        if tc.status == "waived":
            out.append(f"Waived: {tc.message or ''}")
            continue
        if (
            tc.status == "error"
            and not tc.matrices
            and tc.message in (f"Testcase {tc.name} not found!", f"Testcase index {tc.name} out of bound!")
        ):
            out.append(f"ERROR: {tc.message}")  # runTestcase: an id that names no testcase
            continue
        if tc.name:
            out.append(f"Running {tc.name}.")
        for matrix in tc.matrices:
            out += render_matrix(matrix, perf_formatter)
        if tc.status == "error":
            out.append(f"Error: {tc.message or ''}")
    out += [*NOTE, ""]
    return "\n".join(out) + "\n"
