"""What ``gputopo fleet`` reads: the documents named (files, or folders of ``*.json``), each read as
hostile data into the nodes it describes (``core.fleet_facts.Node``), or refused naming why.

Other people's files are data, never instructions: inside a folder a symbolic link is not followed and
not read (it may lead anywhere: a FIFO, a device, another user's file), only regular files are opened,
and a document larger than ``limits.MAX_DOCUMENT_BYTES`` is refused unread. A path named on the command
line is the user's own choice: a link there is followed, to a regular file or a folder only. The fleet
view's own document (``gputopo fleet --json``, anywhere, and every output path of this invocation) is
set aside, not read as a node's: a second run over a folder the first wrote into judges the same nodes.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field

from ..core import keys, limits, schema
from ..core.fleet_facts import Node, node_of
from ..probe.recorded import ProfileError, parse_profile, read_json
from ..render.document import GBPS_OR_NULL, ORIGINS, ReportError, null_or, one_of, text
from ..render.fleet import FLEET_KIND
from ..runtime import files
from .common import CliError

MAX_DOCUMENTS = 100_000
# What the fleet reads of a measurement, checked; the rest (a harness's samples, an all-reduce's rows:
# most of a full check's bytes) is plain JSON already (read_json) and is not read, so not walked again.
_READ_FIELDS = {"gbps": GBPS_OR_NULL, "origin": one_of(*ORIGINS), "error": null_or(text)}


def _measurements(value, path: str = "measurements") -> None:
    """A ReportError naming the first field the fleet reads of the measurements that is not as gputopo
    writes it (the key is checked where it is read)."""
    if value is None:
        return
    if not isinstance(value, list):
        raise ReportError(f"{path}: not a list")
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise ReportError(f"{path}[{i}]: not an object")
        for name, check in _READ_FIELDS.items():
            if name in m:
                check(m[name], f"{path}[{i}].{name}")


class SetAside(Exception):
    """A document not read by design, which is no error: the fleet view's own, a link in a folder."""


@dataclass
class Listing:
    """The documents to read, in order, and those set aside or not listable, with why."""

    paths: list[str] = field(default_factory=list)
    set_aside: list[tuple[str, str]] = field(default_factory=list)
    unread: list[tuple[str, str]] = field(default_factory=list)


LINK_IN_FOLDER = "a symbolic link inside a folder: not followed (name the file it leads to, to read it)"
FLEET_DOCUMENT = "a fleet view's own document (gputopo fleet --json): not a node's"
# How gputopo fleet --json starts (render.fleet.document: its schema, then its kind; before it said its
# kind, its schema, then "healthy", which no node's document has there)
_FLEET_START = re.compile(r'\{\s*"schema":\s*1,\s*("kind":\s*"gputopo fleet"|"healthy":)')
OWN_OUTPUT = "an output of this gputopo fleet ({flags}): not a node's document"


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def documents(paths: list[str], outputs: dict[str, str | None] | None = None) -> Listing:
    """The files named, and every ``*.json`` under the folders named (searched recursively, in name
    order), except: a symbolic link inside a folder (neither followed nor read: set aside), an output
    path of this invocation (``outputs``: flag -> path; set aside), a folder that cannot be listed (not
    read, naming why). A path named that is not there is a usage error (``CliError``)."""
    listing = Listing()
    mine: dict[tuple[int, int], list[str]] = {}
    for flag, path in (outputs or {}).items():
        if path and _identity(path) is not None:
            mine.setdefault(_identity(path), []).append(flag)  # type: ignore[arg-type]  # not None (above)

    def add(path: str, seen: os.stat_result | None) -> None:
        flags = mine.get((seen.st_dev, seen.st_ino)) if seen is not None else None
        if flags:
            listing.set_aside.append((path, OWN_OUTPUT.format(flags=", ".join(flags))))
        else:
            listing.paths.append(path)
        if len(listing.paths) > MAX_DOCUMENTS:
            raise CliError(f"{path}: more than {MAX_DOCUMENTS} documents")

    for path in paths:
        try:
            seen = os.stat(path)  # a path the user names is followed: their own choice
        except FileNotFoundError:
            if os.path.lexists(path):  # a dangling link: named, so it is listed as not read, saying why
                listing.paths.append(path)
                continue
            raise CliError(f"{path}: no such file or folder") from None
        except OSError as exc:
            listing.unread.append((path, f"cannot read: {exc.strerror or exc}"))
            continue
        if stat.S_ISDIR(seen.st_mode):
            _walk(path, listing, add)
        else:
            add(path, seen)  # not a regular file: files.read_text says what it is, without opening it
    return listing


def _walk(folder: str, listing: Listing, add) -> None:
    """Every ``*.json`` under ``folder``, depth first in name order (a folder's own files before its
    subfolders'), by what each entry is itself: a link is set aside, never followed."""
    stack = [folder]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as found:
                entries = sorted(found, key=lambda e: e.name)
        except OSError as exc:
            listing.unread.append((top, f"cannot list the folder: {exc.strerror or exc}"))
            continue
        folders = []
        for entry in entries:
            try:
                if entry.is_symlink():
                    if entry.name.endswith(".json") or _leads_to_folder(entry.path):
                        listing.set_aside.append((entry.path, LINK_IN_FOLDER))
                elif entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif entry.name.endswith(".json"):
                    add(entry.path, entry.stat(follow_symlinks=False))
            except OSError as exc:  # gone meanwhile, or no permission to look
                listing.unread.append((entry.path, f"cannot read: {exc.strerror or exc}"))
        stack += reversed(folders)


def _leads_to_folder(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


def _countable(text: str) -> None:
    """Refuse, before parsing, a text of more values or containers than any document gputopo writes
    (counted as characters, strings' included: an upper bound): parsing 16 MiB of tiny values costs
    twenty times its size in memory."""
    values = text.count(",")
    if values > limits.MAX_DOCUMENT_VALUES:
        raise ValueError(
            f"more than {limits.MAX_DOCUMENT_VALUES:,} JSON values (about {values:,}), the most "
            "gputopo fleet reads of one document: not a document gputopo writes"
        )
    containers = text.count("{") + text.count("[")
    if containers > limits.MAX_DOCUMENT_CONTAINERS:
        raise ValueError(
            f"more than {limits.MAX_DOCUMENT_CONTAINERS:,} JSON objects and lists (about "
            f"{containers:,}), the most gputopo fleet reads of one document: not a document "
            "gputopo writes"
        )


def _few_gpus(topology, where: str) -> None:
    """Refuse, before its schema is read, a topology of more GPUs than a fleet's node has (a node's facts
    grow with its pairs: 400 GPUs would be 160,000 facts, 60 MB kept for one node)."""
    gpus = topology.get("gpus") if isinstance(topology, dict) else None
    if isinstance(gpus, list) and len(gpus) > limits.MAX_FLEET_NODE_GPUS:
        raise ValueError(
            f"{where}.gpus: {len(gpus):,} GPUs, more than the {limits.MAX_FLEET_NODE_GPUS} gputopo "
            "fleet compares in one node"
        )


def _is_fleet_document(doc: dict) -> bool:
    """The fleet view's own document: its kind, or (written before it said its kind) its shape."""
    return doc.get("kind") == FLEET_KIND or ("topology" not in doc and "groups" in doc and "not_read" in doc)


def _figures(doc: dict) -> list:
    out = []
    for i, m in enumerate(doc.get("measurements") or []):
        try:
            key = keys.from_list(m.get("key"))
        except (ValueError, AttributeError):
            raise ValueError(f"measurements[{i}]: not a measurement gputopo writes") from None
        detail = m.get("detail") if isinstance(m.get("detail"), dict) else {}
        backend = detail.get("backend") if isinstance(key, keys.AllReduce) else None
        nvls = detail.get("nvls") if isinstance(detail.get("nvls"), bool) else None
        error = m.get("error") if isinstance(m.get("error"), str) else None
        out.append((key, m.get("gbps"), m.get("origin"), backend if isinstance(backend, str) else None, error, nvls))
    return out


def _failed_checks(doc: dict) -> list[tuple[str, str]]:
    """(item, message) of each check item the document marks failed (``gputopo check``, a run's
    ``--gputopo-check``)."""
    items = doc.get("checks") if isinstance(doc.get("checks"), list) else []
    # checked: a list, and a message that is a str (mypy does not narrow a repeated get())
    return [
        (c["check"], c.get("message") if isinstance(c.get("message"), str) else "")  # type: ignore[misc]
        for c in items  # type: ignore[union-attr]
        if isinstance(c, dict) and isinstance(c.get("check"), str) and c.get("outcome") in ("failed", "error")
    ]


def nodes_from(path: str, *, follow: bool = True) -> list[Node]:
    """The nodes a document describes (a run across nodes lists each); ValueError naming what is wrong,
    OSError where it is no regular file of at most ``limits.MAX_DOCUMENT_BYTES`` (``follow=False``: or a
    link), SetAside where it is the fleet view's own document."""
    try:
        text = files.read_text(
            path, limits.MAX_DOCUMENT_BYTES, follow=follow, bound="the most gputopo fleet reads of one document"
        )
    except OSError as exc:
        if str(exc.strerror).startswith("larger than") and _FLEET_START.match(
            files.read_text(path, 256, follow=follow, head=True)
        ):
            raise SetAside(FLEET_DOCUMENT) from None  # a large fleet's own, by how it starts: not read
        raise
    _countable(text)
    doc = read_json(text, path)
    del text
    if not isinstance(doc, dict):
        raise ValueError("not a gputopo document (a JSON object)")
    if _is_fleet_document(doc):
        raise SetAside(FLEET_DOCUMENT)
    _few_gpus(doc.get("topology"), "topology")
    if "name" in doc and "measurements" not in doc:  # a recorded profile (gputopo record)
        topology = parse_profile(doc, path).topology
        return [
            node_of(
                topology,
                name=topology.hostname or doc["name"],
                path=path,
                identified=False,
                notes=("a recorded profile: no measured figures",),
            )
        ]
    if doc.get("schema") != 1 or "topology" not in doc:
        schema_of = doc.get("schema")
        if "topology" in doc and schema_of != 1:
            raise ValueError(
                f"a gputopo document of schema {str(schema_of)[:40]!r}: this gputopo reads schema 1 "
                "(write it again with this version of gputopo, or read it with the version that wrote it)"
            )
        raise ValueError(
            "not a gputopo document: a run's (--gputopo-json), a check's (gputopo check --json) or a "
            "recorded profile's (gputopo record) has schema 1 and a topology"
        )
    topology = schema.from_dict(doc["topology"], "topology")
    _measurements(doc.get("measurements"))  # only what the fleet view reads is checked
    own = doc.get("source") == "NVML"  # facts (and GPU UUIDs) of the node itself, not a recording's
    notes: tuple[str, ...] = () if own else (f"facts from {doc.get('source')}, not NVML on the node",)
    across = doc.get("nodes") or []
    if len(across) > 1:  # a run under a launcher: each node's facts; its figures are the run's, no node's
        notes += (f"one of the {len(across)} nodes of a run: its figures are the run's, not compared",)
        tops = []
        for i, n in enumerate(across):
            _few_gpus(n.get("topology") if isinstance(n, dict) else None, f"nodes[{i}].topology")
            tops.append(schema.from_dict(n.get("topology") if isinstance(n, dict) else None, f"nodes[{i}].topology"))
        return [
            node_of(
                t, name=t.hostname or f"{path}#{i}", path=path, when=doc.get("written"), notes=notes, identified=own
            )
            for i, t in enumerate(tops)
        ]
    name = topology.hostname or os.path.splitext(os.path.basename(path))[0]
    software = doc.get("software") if isinstance(doc.get("software"), dict) else None
    return [
        node_of(
            topology,
            name=name,
            path=path,
            figures=_figures(doc),
            when=doc.get("written"),
            notes=notes,
            software=software,
            failed_checks=_failed_checks(doc),
            identified=own,
        )
    ]


@dataclass
class Read:
    """What the documents gave: every node they describe (several documents of one node included:
    ``core.fleet.roster`` says which is judged), the documents not read with why (an error: exit
    status 2), and those set aside with why (by design: no error)."""

    nodes: list[Node]
    unread: list[tuple[str, str]]
    set_aside: list[tuple[str, str]]


def read_nodes(paths: list[str], outputs: dict[str, str | None] | None = None) -> Read:
    """The documents named (``documents``), each read into its nodes (``nodes_from``). A document
    found in a folder is read without following a link; one named is read through its links."""
    listing = documents(paths, outputs)
    named = set(paths)
    nodes, unread, set_aside = [], list(listing.unread), list(listing.set_aside)
    for path in listing.paths:
        try:
            nodes += nodes_from(path, follow=path in named)
        except SetAside as exc:
            set_aside.append((path, str(exc)))
        except OSError as exc:
            unread.append((path, exc.strerror or str(exc)))
        except (ValueError, ProfileError, schema.SchemaError, RecursionError) as exc:
            unread.append((path, str(exc).removeprefix(f"{path}:").lstrip()))
    return Read(nodes, unread, set_aside)
