"""``gputopo report``: the self-contained HTML report of a saved --gputopo-json document."""

from __future__ import annotations

import json

from ..core import schema
from ..render import report
from ..render.escape import terminal
from ..render.html import check_document, html_report
from ..runtime import files
from .common import CliError, add_command, check_writable, read_file


def cmd_report(args) -> int:
    """An HTML report drawn from a saved --gputopo-json document."""

    def refuse(token):
        raise ValueError(f"{token} is not a number strict JSON allows")

    check_writable("-o", args.output)
    text = read_file(args.report)
    try:
        doc = json.loads(text, parse_constant=refuse)
        check_document(doc)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and ReportError are ValueErrors
        raise CliError(f"{args.report}: not a gputopo JSON report: {exc}") from None
    try:
        files.write_text(args.output, html_report(doc))
    except OSError as exc:
        raise CliError(f"-o {args.output}: cannot write: {exc.strerror or exc}") from None
    print(terminal(f"wrote {args.output}: {report.header_line(schema.from_dict(doc['topology']))}"))
    return 0


def add_report(sub) -> None:
    p = add_command(
        sub,
        "report",
        "draw the self-contained HTML report of a saved --gputopo-json document",
        "Draw the self-contained HTML report (docs/report.md) of a --gputopo-json, gputopo check\n"
        "--json or gputopo bench --json document: the page --gputopo-html writes during a run.",
        "  pytest --gputopo-machine hgx-h100-nvlink-down --gputopo-json run.json\n"
        "  gputopo report run.json -o run.html",
        "  0    written\n  2    not such a document (the field it cannot draw is named), or -o not writable",
    )
    p.add_argument("report", metavar="RUN.json", help="the JSON document a run wrote")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="PATH.html",
        help="the page to write (required; a regular file is replaced whole, see docs/cli.md)",
    )
    p.set_defaults(func=cmd_report)
