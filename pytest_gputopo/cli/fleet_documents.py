"""What ``gputopo fleet`` reads: the documents named (files, or folders of ``*.json``), each file opened
and its document read as hostile data into the nodes it describes (``render.fleet_reader``), or refused
naming why.

Other people's files are data, never instructions: inside a folder a symbolic link is not followed and
not read (it may lead anywhere: a FIFO, a device, another user's file), only regular files are opened,
and a document larger than ``limits.MAX_DOCUMENT_BYTES`` is refused unread. A path named on the command
line is the user's own choice: a link there is followed, to a regular file or a folder only. The fleet
view's own document (``gputopo fleet --json``, anywhere, and every output path of this invocation) is
set aside, not read as a node's: a second run over a folder the first wrote into judges the same nodes.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from ..core import limits
from ..core.fleet_facts import Node, Shapes
from ..render.fleet_reader import FLEET_DOCUMENT, NOT_READ, SetAside, nodes_of, parsed, starts_as_fleet_document
from ..runtime import files
from .common import CliError

MAX_DOCUMENTS = 100_000


@dataclass
class Listing:
    """The documents to read, in order, and those set aside or not listable, with why."""

    paths: list[str] = field(default_factory=list)
    set_aside: list[tuple[str, str]] = field(default_factory=list)
    unread: list[tuple[str, str]] = field(default_factory=list)


LINK_IN_FOLDER = "a symbolic link inside a folder: not followed (name the file it leads to, to read it)"
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


def nodes_from(path: str, *, follow: bool = True, shapes: Shapes | None = None) -> list[Node]:
    """The nodes a document's file describes (``render.fleet_reader.nodes_of``); one of ``NOT_READ`` naming
    what is wrong, OSError where it is no regular file of at most ``limits.MAX_DOCUMENT_BYTES`` (``follow=False``: or a
    link), SetAside where it is the fleet view's own document. ``shapes``: the fleet's topologies read so far."""
    try:
        text = files.read_text(
            path, limits.MAX_DOCUMENT_BYTES, follow=follow, bound="the most gputopo fleet reads of one document"
        )
    except OSError as exc:
        if str(exc.strerror).startswith("larger than") and starts_as_fleet_document(
            files.read_text(path, 256, follow=follow, head=True)
        ):
            raise SetAside(FLEET_DOCUMENT) from None  # a large fleet's own, by how it starts: not read
        raise
    doc = parsed(text, path)
    del text  # not kept while the document is read
    return nodes_of(doc, path, shapes)


@dataclass
class Read:
    """What the documents gave: every node they describe (several documents of one node included:
    ``core.fleet_roster.roster`` says which is judged), the documents not read with why (an error: exit
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
    shapes = Shapes()  # what nodes of one topology have alike, found once while the documents are read
    for path in listing.paths:
        try:
            nodes += nodes_from(path, follow=path in named, shapes=shapes)
        except SetAside as exc:
            set_aside.append((path, str(exc)))
        except OSError as exc:
            unread.append((path, exc.strerror or str(exc)))
        except NOT_READ as exc:
            unread.append((path, str(exc).removeprefix(f"{path}:").lstrip()))
    return Read(nodes, unread, set_aside)
