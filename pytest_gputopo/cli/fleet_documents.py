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
