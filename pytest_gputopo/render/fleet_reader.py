"""One of gputopo's own documents read back by ``gputopo fleet`` into the nodes it describes
(``core.fleet_facts.Node``): a run's or a check's report (its schema: ``document``) or a recorded
profile (``core.schema``), told apart by their keys, and the fleet view's own document (``fleet``)
set aside. The document is other people's data: only what the fleet reads of it is checked, and a
text or a topology larger than any gputopo writes is refused before it is read. Files are the
command's (``cli/fleet_documents``); here a document is a parsed JSON value and the name it goes by.
"""

from __future__ import annotations

import os
import re

from ..core import keys, limits, schema
from ..core.fleet_facts import Node, Shapes, node_of
from ..probe.recorded import ProfileError, parse_profile, read_json
from .document import GBPS_OR_NULL, ORIGINS, ReportError, null_or, one_of, text
from .fleet import FLEET_KIND

# What the fleet reads of a measurement, checked; the rest (a harness's samples, an all-reduce's rows:
# most of a full check's bytes) is plain JSON already (read_json) and is not read, so not walked again.
_READ_FIELDS = {"gbps": GBPS_OR_NULL, "origin": one_of(*ORIGINS), "error": null_or(text)}
# What a document not read raises, each naming what is wrong (OSError is the files')
NOT_READ = (ValueError, ProfileError, schema.SchemaError, RecursionError)


class SetAside(Exception):
    """A document not read by design, which is no error: the fleet view's own (a link in a folder is the
    command's: `cli/fleet_documents`)."""


FLEET_DOCUMENT = "a fleet view's own document (gputopo fleet --json): not a node's"
# How gputopo fleet --json starts (render.fleet.document: its schema, then its kind; before it said its
# kind, its schema, then "healthy", which no node's document has there)
_FLEET_START = re.compile(r'\{\s*"schema":\s*1,\s*("kind":\s*"gputopo fleet"|"healthy":)')


def starts_as_fleet_document(head: str) -> bool:
    """Whether a document's first characters are how the fleet view's own starts (one too large to read)."""
    return bool(_FLEET_START.match(head))


def _countable(text: str) -> None:
    """Refuse, before parsing, a text of more values or containers than any document gputopo writes
    (counted as characters, strings' included: an upper bound): parsing 16 MiB of tiny values costs
    twenty times its size in memory. A text of fewer characters than a bound cannot exceed it: not
    counted (a full check of 8 GPUs is 0.3 MB, under the million values)."""
    values = text.count(",") if len(text) > limits.MAX_DOCUMENT_VALUES else 0
    if values > limits.MAX_DOCUMENT_VALUES:
        raise ValueError(
            f"more than {limits.MAX_DOCUMENT_VALUES:,} JSON values (about {values:,}), the most "
            "gputopo fleet reads of one document: not a document gputopo writes"
        )
    containers = text.count("{") + text.count("[") if len(text) > limits.MAX_DOCUMENT_CONTAINERS else 0
    if containers > limits.MAX_DOCUMENT_CONTAINERS:
        raise ValueError(
            f"more than {limits.MAX_DOCUMENT_CONTAINERS:,} JSON objects and lists (about "
            f"{containers:,}), the most gputopo fleet reads of one document: not a document "
            "gputopo writes"
        )


def parsed(text: str, path: str) -> object:
    """The JSON value of a document's text, refused unparsed where it holds more values or containers
    than gputopo writes (ValueError naming the count)."""
    _countable(text)
    return read_json(text, path)


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


def _figures(value, keyed: bool = True) -> list:
    """(key, GB/s, origin, backend, error, nvls) of each of a document's measurements, read in one pass:
    a ReportError naming the first field the fleet reads that is not as gputopo writes it, else (where
    its figures are read, ``keyed``) a ValueError naming the first measurement whose key gputopo does
    not write."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ReportError("measurements: not a list")
    out, unknown = [], None
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise ReportError(f"measurements[{i}]: not an object")
        for name, check in _READ_FIELDS.items():
            if name in m:
                check(m[name], f"measurements[{i}].{name}")
        try:
            key = keys.from_list(m.get("key"))
        except (ValueError, AttributeError):
            unknown = f"measurements[{i}]" if unknown is None else unknown
            continue
        detail = m.get("detail")
        detail = detail if isinstance(detail, dict) else {}
        backend = detail.get("backend") if isinstance(key, keys.AllReduce) else None
        nvls = detail.get("nvls") if isinstance(detail.get("nvls"), bool) else None
        error = m.get("error") if isinstance(m.get("error"), str) else None
        out.append((key, m.get("gbps"), m.get("origin"), backend if isinstance(backend, str) else None, error, nvls))
    if unknown is not None and keyed:
        raise ValueError(f"{unknown}: not a measurement gputopo writes")
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


def nodes_of(doc: object, path: str, shapes: Shapes | None = None) -> list[Node]:
    """The nodes a parsed document describes (a run across nodes lists each), ``path`` the name it goes
    by (a node without a host name is named after it); one of ``NOT_READ`` naming what is wrong, SetAside
    where it is the fleet view's own document. ``shapes``: the fleet's topologies read so far."""
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
                shapes=shapes,
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
    across = doc.get("nodes") or []
    # only what the fleet view reads is checked; a run's figures across nodes are no node's: not read
    figures = _figures(doc.get("measurements"), keyed=len(across) <= 1)
    own = doc.get("source") == "NVML"  # facts (and GPU UUIDs) of the node itself, not a recording's
    notes: tuple[str, ...] = () if own else (f"facts from {doc.get('source')}, not NVML on the node",)
    if len(across) > 1:  # a run under a launcher: each node's facts; its figures are the run's, no node's
        notes += (f"one of the {len(across)} nodes of a run: its figures are the run's, not compared",)
        tops = []
        for i, n in enumerate(across):
            _few_gpus(n.get("topology") if isinstance(n, dict) else None, f"nodes[{i}].topology")
            tops.append(schema.from_dict(n.get("topology") if isinstance(n, dict) else None, f"nodes[{i}].topology"))
        return [
            node_of(
                t,
                name=t.hostname or f"{path}#{i}",
                path=path,
                when=doc.get("written"),
                notes=notes,
                identified=own,
                shapes=shapes,
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
            figures=figures,
            when=doc.get("written"),
            notes=notes,
            software=software,
            failed_checks=_failed_checks(doc),
            identified=own,
            shapes=shapes,
        )
    ]
