"""What ``gputopo fleet`` reads: the documents named (files, or folders of ``*.json``), each read as
hostile data into the nodes it describes (``core.fleet_facts.Node``), or refused naming why."""

from __future__ import annotations

import os

from ..core import keys, schema
from ..core.fleet_facts import Node, node_of
from ..probe.recorded import parse_profile, read_json
from ..render.document import MEASUREMENT, list_of, null_or
from ..runtime import files
from .common import CliError

MAX_DOCUMENTS = 100_000
MEASUREMENTS = null_or(list_of(MEASUREMENT))


def documents(paths: list[str]) -> list[str]:
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
        nvls = detail.get("nvls") if isinstance(detail.get("nvls"), bool) else None
        error = m.get("error") if isinstance(m.get("error"), str) else None
        out.append((key, m.get("gbps"), m.get("origin"), backend if isinstance(backend, str) else None, error, nvls))
    return out


def _failed_checks(doc: dict) -> list[tuple[str, str]]:
    """(item, message) of each check item the document marks failed (``gputopo check``, a run's
    ``--gputopo-check``)."""
    items = doc.get("checks") if isinstance(doc.get("checks"), list) else []
    return [(c["check"], c.get("message") if isinstance(c.get("message"), str) else "")
            for c in items if isinstance(c, dict) and isinstance(c.get("check"), str)
            and c.get("outcome") in ("failed", "error")]


def nodes_from(path: str) -> list[Node]:
    """The nodes a document describes (a run across nodes lists each); ValueError naming what is wrong."""
    doc = read_json(files.read_text(path), path)
    if not isinstance(doc, dict):
        raise ValueError("not a gputopo document (a JSON object)")
    if "name" in doc and "measurements" not in doc:  # a recorded profile (gputopo record)
        topology = parse_profile(doc, path).topology
        return [node_of(topology, name=topology.hostname or doc["name"], path=path, identified=False,
                        notes=("a recorded profile: no measured figures",))]
    if doc.get("schema") != 1 or "topology" not in doc:
        schema_of = doc.get("schema")
        if "topology" in doc and schema_of != 1:
            raise ValueError(f"a gputopo document of schema {str(schema_of)[:40]!r}: this gputopo reads schema 1 "
                             "(write it again with this version of gputopo, or read it with the version that wrote it)")
        raise ValueError("not a gputopo document: a run's (--gputopo-json), a check's (gputopo check --json) or a "
                         "recorded profile's (gputopo record) has schema 1 and a topology")
    topology = schema.from_dict(doc["topology"], "topology")
    MEASUREMENTS(doc.get("measurements"), "measurements")  # only what the fleet view reads is checked
    own = doc.get("source") == "NVML"  # facts (and GPU UUIDs) of the node itself, not a recording's
    notes = () if own else (f"facts from {doc.get('source')}, not NVML on the node",)
    across = doc.get("nodes") or []
    if len(across) > 1:  # a run under a launcher: each node's facts; its figures are the run's, no node's
        notes += (f"one of the {len(across)} nodes of a run: its figures are the run's, not compared",)
        tops = [schema.from_dict(n.get("topology") if isinstance(n, dict) else None, f"nodes[{i}].topology")
                for i, n in enumerate(across)]
        return [node_of(t, name=t.hostname or f"{path}#{i}", path=path, when=doc.get("written"), notes=notes,
                        identified=own) for i, t in enumerate(tops)]
    name = topology.hostname or os.path.splitext(os.path.basename(path))[0]
    software = doc.get("software") if isinstance(doc.get("software"), dict) else None
    return [node_of(topology, name=name, path=path, figures=_figures(doc), when=doc.get("written"), notes=notes,
                    software=software, failed_checks=_failed_checks(doc), identified=own)]
