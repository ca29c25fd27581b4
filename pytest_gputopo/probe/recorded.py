"""Recorded machines: profiles on disk (bundled ones under ``pytest_gputopo/machines``).

A profile is JSON: ``schema``, ``name``, ``description``, ``sources`` (the public outputs its facts
come from), ``inferred`` (which fields are inferred rather than read), and ``topology`` (the
``schema.to_dict`` form). Loading never guesses: a bad file is a ``ProfileError`` naming the file
and the field.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..core import limits, model, schema
from ..runtime import files

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "machines"


class ProfileError(Exception):
    """A machine profile cannot be used; the message names the file (and field, when known)."""


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    sources: tuple
    inferred: tuple
    topology: model.Topology
    path: str


def bundled_names() -> list[str]:
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.json"))


def resolve(name_or_path: str) -> Path:
    """A bundled machine's name, or a path to a profile file."""
    if os.sep in name_or_path or name_or_path.endswith(".json") or (os.altsep and os.altsep in name_or_path):
        path = Path(name_or_path)
        if not os.path.lexists(path):  # anything else there (a FIFO, a link loop): reading it says what
            raise ProfileError(f"{name_or_path}: no such machine profile file")
        return path
    path = BUNDLED_DIR / f"{name_or_path}.json"
    if not path.is_file():
        raise ProfileError(
            f"unknown machine {name_or_path!r}; bundled machines: {', '.join(bundled_names())} "
            f"(or give a path to a profile written by `gputopo record`)"
        )
    return path


def parse_profile(data: object, where: str) -> Profile:
    """Validate a profile's dict form; ``where`` (the file) prefixes every error."""
    try:
        if not isinstance(data, dict):
            raise schema.SchemaError("(top level)", "expected a JSON object")
        if data.get("schema") != schema.SCHEMA_VERSION:
            raise schema.SchemaError(
                "schema",
                f"version {limits.show_value(data.get('schema'))} is not supported "
                f"(this plugin reads {schema.SCHEMA_VERSION})",
            )
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise schema.SchemaError("name", "missing or not a string")
        if not isinstance(data.get("description", ""), str):
            raise schema.SchemaError("description", "expected a string")
        for key in ("sources", "inferred"):
            if not isinstance(data.get(key, []), list):
                raise schema.SchemaError(key, "expected a list")
        if "topology" not in data:
            raise schema.SchemaError("topology", "missing")
        topology = schema.from_dict(data["topology"], "topology")
    except schema.SchemaError as exc:
        raise ProfileError(f"{where}: field {exc}") from None
    topology = replace(topology, source=model.Source("recorded", name, where))
    return Profile(
        name=name,
        description=str(data.get("description", "")),
        sources=tuple(data.get("sources", [])),
        inferred=tuple(data.get("inferred", [])),
        topology=topology,
        path=where,
    )


def load_profile(name_or_path: str) -> Profile:
    path = resolve(name_or_path)
    try:
        text = files.read_text(str(path))
    except OSError as exc:
        raise ProfileError(f"{path}: {exc.strerror or exc}") from None
    return parse_profile(read_json(text, str(path)), str(path))


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _short_int(text: str) -> int:
    if len(text) > 40:  # int() refuses 4,300 digits with a message about sys.set_int_max_str_digits
        raise ValueError(f"a number of {len(text)} digits is not a profile's")
    return int(text)


def read_json(text: str, where: str) -> object:
    """Strict JSON: NaN and Infinity (which Python's json reads by default), numbers of thousands
    of digits and nesting deeper than the json module can follow are a ProfileError naming ``where``."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_int=_short_int)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{where}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    except ValueError as exc:
        raise ProfileError(f"{where}: not valid JSON: {exc}") from None
    except RecursionError:
        raise ProfileError(f"{where}: not valid JSON: nested too deeply") from None


def profile_dict(name: str, topology: model.Topology, description: str = "", sources=(), inferred=()) -> dict:
    """The JSON form of a profile (what ``gputopo record`` writes)."""
    topo = schema.to_dict(replace(topology, source=model.Source("none"), warnings=()))
    topo.pop("schema")
    topo.pop("source")
    return {
        "schema": schema.SCHEMA_VERSION,
        "name": name,
        "description": description,
        "sources": list(sources),
        "inferred": list(inferred),
        "topology": topo,
    }
