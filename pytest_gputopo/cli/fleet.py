"""``gputopo fleet``: many nodes' documents (run reports, check reports, recorded profiles) judged
against each other, each node by the peers of its GPU model (``core.fleet``)."""

from __future__ import annotations

import sys
import time

from ..core.fleet import judge
from ..core.fleet_roster import roster
from ..render import fleet as fleet_out
from ..runtime import files
from .common import CliError, add_command, check_writable
from .fleet_documents import read_nodes

# The exit statuses, one meaning each (docs/fleet.md, "Exit status"); 3 is every command's internal error.
NAMED, UNREAD, NOT_JUDGED = 1, 2, 5


def status(fleet, unread: list) -> int:
    """0 only where nodes were judged by their peers and none is named nor split; a named node or a
    split group first (what an operator acts on), then a document not read, then too few to judge."""
    if fleet.named or fleet.splits:
        return NAMED
    if unread:
        return UNREAD
    return NOT_JUDGED if fleet.not_compared else 0


def cmd_fleet(args) -> int:
    for flag, path in (("--html", args.html), ("--json", args.json), ("--markdown", args.markdown)):
        check_writable(flag, path)
    read = read_nodes(args.documents, outputs={"--html": args.html, "--json": args.json, "--markdown": args.markdown})
    nodes, unread = read.nodes, read.unread
    if not nodes:
        raise CliError(
            "no node to judge: " + (f"{len(unread)} documents, none readable" if unread else "no document found")
        )
    judged, superseded = roster(nodes, time.time())  # the collection's time: no document is newer
    nodes.clear()  # the nodes as read (superseded documents' too) are not kept while the fleet is judged
    fleet = judge(judged, tuple(superseded), tuple(read.set_aside))
    judged.clear()  # nor their figures while the outputs are written: the fleet holds what they draw
    try:
        for path, write in (
            (args.html, fleet_out.html_page),
            (args.markdown, fleet_out.summary_markdown),
            (args.json, fleet_out.document_text),
        ):
            if path:
                files.write_text(path, write(fleet, unread))
    except OSError as exc:
        raise CliError(f"cannot write: {exc.strerror or exc}") from None
    sys.stdout.write("\n".join(fleet_out.lines(fleet, unread)) + "\n")
    return status(fleet, unread)


def add_fleet(sub) -> None:
    p = add_command(
        sub,
        "fleet",
        "judge many nodes' documents against each other, each by its peers",
        "Read the documents gputopo writes on many nodes (--gputopo-json run reports, `gputopo check\n"
        "--json` reports, recorded profiles; files or folders of them), group the nodes by GPU model,\n"
        "and name each node whose topology, versions or measured figures differ from its peers'.\n"
        "No rule file: the peers are the reference (docs/fleet.md).",
        "  srun --nodes=64 --ntasks-per-node=1 gputopo check --level full --json-dir out/\n"
        '  gputopo fleet out/ --html fleet.html --markdown "$GITHUB_STEP_SUMMARY"',
        "  0    every node judged by its peers, and none named nor in a split group\n"
        "  1    a node is named (a fault of its own, or a difference from its peers), or a group\n"
        "       is split on a fact (whatever else is true)\n"
        "  2    bad arguments, or a document could not be read (the others are still judged)\n"
        "  5    too few nodes of a GPU model to judge them by their peers (3 needed); none named",
    )
    p.add_argument("documents", nargs="+", metavar="DOC", help="a document, or a folder of them (*.json)")
    p.add_argument("--html", metavar="PATH.html", help="write the fleet's page (default: none)")
    p.add_argument("--json", metavar="PATH.json", help="write the fleet's JSON document (default: none)")
    p.add_argument("--markdown", metavar="PATH.md", help="write a Markdown summary, a CI step's (default: none)")
    p.set_defaults(func=cmd_fleet)
