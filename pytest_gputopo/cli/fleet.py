"""``gputopo fleet``: many nodes' documents (run reports, check reports, recorded profiles) judged
against each other, each node by the peers of its GPU model (``core.fleet``)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from ..core import schema
from ..core.fleet import judge
from ..core.fleet_facts import Node
from ..probe.recorded import ProfileError
from ..render import fleet as fleet_out
from ..runtime import files
from .common import CliError, add_command, check_writable
from .fleet_documents import documents, nodes_from


def read_nodes(paths: list[str]) -> tuple[list[Node], list[tuple[str, str]]]:
    """The nodes, and the documents not read with why. A node is its host name and its GPUs' UUIDs: a
    second document of one already read is not compared as another node; hosts of one name with other
    GPUs (VMs and containers often share a name) are told apart by their document's file name."""
    nodes, unread, seen, names = [], [], {}, set()
    for path in documents(paths):
        try:
            found = nodes_from(path)
        except OSError as exc:
            unread.append((path, exc.strerror or str(exc)))
            continue
        except (ValueError, ProfileError, schema.SchemaError, RecursionError) as exc:
            unread.append((path, str(exc).removeprefix(f"{path}:").lstrip()))
            continue
        for node in found:
            identity = (node.name, node.uuids)
            if identity in seen:
                unread.append((path, f"another document of {node.name} (the same GPUs) was read first "
                                     f"({seen[identity]})"))
                continue
            seen[identity] = path
            if node.name in names:
                node = dataclasses.replace(node, name=f"{node.name} ({os.path.basename(path)})")
            names.add(node.name)
            nodes.append(node)
    return nodes, unread


def cmd_fleet(args) -> int:
    for flag, path in (("--html", args.html), ("--json", args.json), ("--markdown", args.markdown)):
        check_writable(flag, path)
    nodes, unread = read_nodes(args.documents)
    if not nodes:
        raise CliError("no node to judge: " + (f"{len(unread)} documents, none readable" if unread else
                                               "no document found"))
    fleet = judge(nodes)
    try:
        for path, write in ((args.html, fleet_out.html_page), (args.markdown, fleet_out.summary_markdown),
                            (args.json, lambda f, u: json.dumps(fleet_out.document(f, u), indent=1) + "\n")):
            if path:
                files.write_text(path, write(fleet, unread))
    except OSError as exc:
        raise CliError(f"cannot write: {exc.strerror or exc}") from None
    sys.stdout.write("\n".join(fleet_out.lines(fleet, unread)) + "\n")
    return 2 if unread else 0 if fleet.healthy else 1


def add_fleet(sub) -> None:
    p = add_command(sub, "fleet", "judge many nodes' documents against each other, each by its peers",
                    "Read the documents gputopo writes on many nodes (--gputopo-json run reports, `gputopo check\n"
                    "--json` reports, recorded profiles; files or folders of them), group the nodes by GPU model,\n"
                    "and name each node whose topology, versions or measured figures differ from its peers'.\n"
                    "No rule file: the peers are the reference (docs/fleet.md).",
                    "  srun --ntasks-per-node=1 gputopo check --level full --json out/%N.json\n"
                    "  gputopo fleet out/ --html fleet.html --markdown \"$GITHUB_STEP_SUMMARY\"",
                    "  0    no node differs from its peers\n"
                    "  1    a node is named, or a group is split on a fact\n"
                    "  2    bad arguments, or a document could not be read (the others are still judged)")
    p.add_argument("documents", nargs="+", metavar="DOC", help="a document, or a folder of them (*.json)")
    p.add_argument("--html", metavar="PATH.html", help="write the fleet's page (default: none)")
    p.add_argument("--json", metavar="PATH.json", help="write the fleet's JSON document (default: none)")
    p.add_argument("--markdown", metavar="PATH.md", help="write a Markdown summary, a CI step's (default: none)")
    p.set_defaults(func=cmd_fleet)
