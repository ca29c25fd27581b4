"""``gputopo spec``: the expected-bandwidth table with the source of every figure, and the floors."""

from __future__ import annotations

from ..core import spec_table, thresholds
from ..render import tables
from .common import add_command, emit


def cmd_spec(args) -> int:
    rows = spec_table.table_rows()
    if args.json:
        emit([{"category": c, "item": i, "gbps": f.gbps, "source": f.source} for c, i, f in rows], True)
        return 0
    emit(None, False, tables.spec_lines(rows, thresholds.DEFAULT_FLOORS))
    return 0


def add_spec(sub) -> None:
    p = add_command(
        sub,
        "spec",
        "print the expected-bandwidth table with the source of every figure",
        "The figures links should give (PCIe per generation and width, NVLink per link and per GPU,\n"
        "host<->device, published per-SKU all-reduce floors), each with its source, and the default\n"
        "efficiency floors (docs/thresholds.md; each source's title, publisher and address:\n"
        "docs/sources.md).",
        "  gputopo spec --json",
        "  0    printed",
    )
    p.add_argument(
        "--json", action="store_true", help="print the table and floors as JSON (default: one line per figure)"
    )
    p.set_defaults(func=cmd_spec)
