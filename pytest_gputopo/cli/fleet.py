"""``gputopo fleet``: many nodes' documents (run reports, check reports, recorded profiles) judged
against each other, each node by the peers of its GPU model (``core.fleet``)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from ..core import keys, schema
from ..core.fleet import judge
from ..core.fleet_facts import Node, node_of
from ..probe.recorded import ProfileError, parse_profile, read_json
from ..render import fleet as fleet_out
from ..render.document import MEASUREMENT, list_of, null_or
from ..runtime import files
from .common import CliError, add_command, check_writable

MAX_DOCUMENTS = 100_000
MEASUREMENTS = null_or(list_of(MEASUREMENT))


def _documents(paths: list[str]) -> list[str]:
    """The files named, and every ``*.json`` under the folders named (links not followed), in order."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            for top, dirs, names in os.walk(path):
                dirs.sort()
                found += [os.path.join(top, n) for n in sorted(names) if n.endswith(".json")]
        elif os.path.lexists(path):
            found.append(path)
        else:
            raise CliError(f"{path}: no such file or folder")
        if len(found) > MAX_DOCUMENTS:
            raise CliError(f"{path}: more than {MAX_DOCUMENTS} documents")
    return found


def _figures(doc: dict) -> list:
    out = []
    for i, m in enumerate(doc.get("measurements") or []):
        try:
            key = keys.from_list(m.get("key"))
        except (ValueError, AttributeError):
            raise ValueError(f"measurements[{i}]: not a measurement gputopo writes") from None
        detail = m.get("detail") if isinstance(m.get("detail"), dict) else {}
        backend = detail.get("backend") if isinstance(key, keys.AllReduce) else None
        out.append((key, m.get("gbps"), m.get("origin"), backend if isinstance(backend, str) else None))
    return out


def nodes_from(path: str) -> list[Node]:
    """The nodes a document describes (a run across nodes lists each); ValueError naming what is wrong."""
    doc = read_json(files.read_text(path), path)
    if not isinstance(doc, dict):
        raise ValueError("not a gputopo document (a JSON object)")
    if "name" in doc and "measurements" not in doc:  # a recorded profile (gputopo record)
        topology = parse_profile(doc, path).topology
        return [node_of(topology, name=topology.hostname or doc["name"], path=path,
                        notes=("a recorded profile: no measured figures",))]
    if doc.get("schema") != 1 or "topology" not in doc:
        raise ValueError("not a gputopo document: no schema 1 and topology (a run's, a check's or a profile)")
    topology = schema.from_dict(doc["topology"], "topology")
    MEASUREMENTS(doc.get("measurements"), "measurements")  # only what the fleet view reads is checked
    notes = () if doc.get("source") == "NVML" else (f"facts from {doc.get('source')}, not NVML on the node",)
    across = doc.get("nodes") or []
    if len(across) > 1:  # a run under a launcher: each node's facts; its figures are the run's, no node's
        notes += (f"one of the {len(across)} nodes of a run: its figures are the run's, not compared",)
        tops = [schema.from_dict(n.get("topology") if isinstance(n, dict) else None, f"nodes[{i}].topology")
                for i, n in enumerate(across)]
        return [node_of(t, name=t.hostname or f"{path}#{i}", path=path, when=doc.get("written"), notes=notes)
                for i, t in enumerate(tops)]
    name = topology.hostname or os.path.splitext(os.path.basename(path))[0]
    software = doc.get("software") if isinstance(doc.get("software"), dict) else None
    return [node_of(topology, name=name, path=path, figures=_figures(doc), when=doc.get("written"), notes=notes,
                    software=software)]


def read_nodes(paths: list[str]) -> tuple[list[Node], list[tuple[str, str]]]:
    """The nodes, and the documents not read with why. A node is its host name and its GPUs' UUIDs: a
    second document of one already read is not compared as another node; hosts of one name with other
    GPUs (VMs and containers often share a name) are told apart by their document's file name."""
    nodes, unread, seen, names = [], [], {}, set()
    for path in _documents(paths):
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
