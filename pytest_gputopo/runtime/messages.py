"""What the run and its children say to each other: every message a frozen dataclass of its own kind,
turned into JSON and read back here only, the same way on every channel.

A channel (``Channel``) names the kinds it carries; ``Channel.encode`` writes a message as one line
tagged with its kind, and refuses anything else, a plain dict first of all. ``Channel.decode`` reads
a line as untrusted input (a child may die mid-line, a library may print to the same stream, a test
may write anything anywhere): the kind must be one of the channel's, and every field is checked
against its annotation (``int``, ``float``, ``str``, ``bool``, ``None``, unions, ``Literal``, tuples,
lists, ``dict[str, T]``, ``Any`` as plain JSON, nested dataclasses and TypedDicts), none missing and
none unknown; then the message's own ``invalid()``, where it has one. Whatever fails is a
``MessageError`` that names the channel, where the line came from and why.

A field whose value has a JSON form of its own (a topology, CUDA's view) says so in its metadata
(``codec``), and is written and read through that.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import sys
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

M = TypeVar("M")
CODEC = "gputopo_codec"  # a field's metadata key: (encode, decode) of a value with a JSON form of its own
KIND = "kind"  # the tag each encoded message carries
MAX_LINE = 64 << 20  # a line longer than this is not read: a child's message is far smaller
_SHOWN = 80  # of a refused value, this much is said


class MessageError(ValueError):
    """A message that is not one of its channel's, saying which channel, whence and why."""


def codec(encode: Callable[[Any], Any], decode: Callable[[Any], Any]) -> dict[str, Any]:
    """A field's metadata: its value is written by ``encode`` and read by ``decode`` (which raises
    ValueError or TypeError for a value it refuses); None stays None."""
    return {CODEC: (encode, decode)}


def is_message(value: object) -> bool:
    """Whether ``value`` is a message (a dataclass instance): a dict, typed or not, is not."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def to_json(message: object) -> dict[str, Any]:
    """``message``'s fields as JSON data; TypeError for anything that is not a message."""
    if not is_message(message):
        raise TypeError(f"{type(message).__name__} is not a message (a dataclass of its channel's): {_show(message)}")
    out = {}
    for field in dataclasses.fields(message):  # type: ignore[arg-type]  # a dataclass instance (above)
        value = getattr(message, field.name)
        if CODEC in field.metadata and value is not None:
            out[field.name] = field.metadata[CODEC][0](value)
        else:
            out[field.name] = _plain(value, field.name)
    return out


def from_json(kind: type[M], data: object, source: str) -> M:
    """``data`` as a ``kind`` message, checked whole; MessageError naming ``source`` and why."""
    try:
        return _message(kind, data)
    except _Refused as refused:
        raise MessageError(f"{source}: not a {kind.__name__} message: {refused}") from None


class Channel:
    """The message kinds one channel carries (``name``: what it is, for its errors)."""

    def __init__(self, name: str, *kinds: type) -> None:
        self.name = name
        self.kinds = {kind.__name__: kind for kind in kinds}

    def encode(self, message: object) -> str:
        """One line (no newline) for ``message``; TypeError for anything not of this channel's kinds."""
        if type(message) is not self.kinds.get(type(message).__name__):
            raise TypeError(
                f"{self.name}: a {type(message).__name__} is not one of its messages "
                f"({', '.join(self.kinds)}): {_show(message)}"
            )
        return json.dumps({KIND: type(message).__name__, **to_json(message)})

    def decode(self, line: str | bytes, source: str) -> Any:
        """The message ``line`` holds; MessageError (naming this channel and ``source``) for anything else."""
        where = f"{self.name} ({source})"
        if len(line) > MAX_LINE:
            raise MessageError(f"{where}: a line of {len(line)} bytes is not a message")
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            raise MessageError(f"{where}: not JSON: {_show(line)}") from None
        if not isinstance(data, dict) or data.get(KIND) not in self.kinds:
            raise MessageError(f"{where}: not one of its messages ({', '.join(self.kinds)}): {_show(data)}")
        kind = self.kinds[data.pop(KIND)]
        return from_json(kind, data, where)

    def write_file(self, path: str, message: object) -> None:
        """``message`` as the whole of the file ``path``, replaced at once (a reader never sees half)."""
        line = self.encode(message) + "\n"  # refused before a file is made
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(line)
        os.replace(path + ".tmp", path)

    def read_file(self, path: str) -> Any:
        """The message the file ``path`` holds; MessageError naming the file (OSError where it cannot be read)."""
        with open(path, "rb") as f:
            raw = f.read(MAX_LINE + 1)
        return self.decode(raw, path)


class _Refused(Exception):
    """Why a value is not what its field says (internal: ``from_json`` names the message)."""


def _message(kind: type[M], data: object) -> M:
    if typing.is_typeddict(kind):
        return _typed_dict(kind, data)  # type: ignore[return-value]  # a TypedDict's value is its dict
    if not isinstance(data, dict):
        raise _Refused(f"{_show(data)} is not an object")
    fields = {f.name: f for f in dataclasses.fields(kind)}  # type: ignore[arg-type]  # a message kind
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        raise _Refused(f"unknown field {_show(unknown[0])}")
    values = {}
    for name, field in fields.items():
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise _Refused(f"field {name!r} is missing")
            continue
        values[name] = _field_value(kind, field, data[name])
    message = kind(**values)
    why = message.invalid() if callable(getattr(message, "invalid", None)) else None  # type: ignore[attr-defined]
    if why:
        raise _Refused(why)
    return message


def _field_value(kind: type, field: dataclasses.Field, value: object) -> object:
    if CODEC in field.metadata:
        if value is None:
            return None
        try:
            return field.metadata[CODEC][1](value)
        except (ValueError, TypeError, KeyError) as exc:
            raise _Refused(f"{field.name}: {exc}") from None
    return _checked(_hints(kind)[field.name], value, field.name)


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    """Each field's annotation, resolved in its module (as ``typing.get_type_hints`` does, field by
    field: a field with a codec of its own may name a type its module imports for the type checker only)."""
    names = vars(sys.modules[kind.__module__])
    return {
        f.name: eval(f.type, names) if isinstance(f.type, str) else f.type  # noqa: S307 - the package's own annotation
        for f in dataclasses.fields(kind)
        if CODEC not in f.metadata
    }


def _checked(hint: Any, value: object, where: str) -> object:
    """``value`` as ``hint`` says (a JSON list as a tuple, an int as a float), or _Refused."""
    origin = get_origin(hint)
    if hint is Any:
        problem = _json_problem(value)
        if problem:
            raise _Refused(f"{where} {problem}")
        return value
    if hint is None or hint is type(None):
        if value is None:
            return None
    elif origin in (Union, types.UnionType):
        return _union(hint, value, where)
    elif origin is Literal:
        if any(type(value) is type(allowed) and value == allowed for allowed in get_args(hint)):
            return value
        raise _Refused(f"{where} {_show(value)} is not one of {', '.join(map(repr, get_args(hint)))}")
    elif hint in (bool, int, str):
        if type(value) is hint:
            return value
    elif hint is float:
        if type(value) in (int, float) and not math.isnan(value):  # type: ignore[arg-type]  # a number
            return float(value)  # type: ignore[arg-type]  # a number
    elif origin in (tuple, list):
        return _sequence(hint, origin, value, where)
    elif origin is dict:
        return _mapping(hint, value, where)
    elif dataclasses.is_dataclass(hint) or typing.is_typeddict(hint):
        try:
            return _message(hint, value)
        except _Refused as refused:
            raise _Refused(f"{where}: {refused}") from None
    else:
        raise TypeError(f"{where}: a message field may not be a {hint!r}")  # the message's own fault
    raise _Refused(f"{where} {_show(value)} is not {_name(hint)}")


def _union(hint: Any, value: object, where: str) -> object:
    for option in sorted(get_args(hint), key=lambda h: h is not type(None)):  # None first
        try:
            return _checked(option, value, where)
        except _Refused:
            continue
    raise _Refused(f"{where} {_show(value)} is not {_name(hint)}")


def _sequence(hint: Any, origin: type, value: object, where: str) -> object:
    if not isinstance(value, list):
        raise _Refused(f"{where} {_show(value)} is not a list")
    args = get_args(hint)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):  # a fixed tuple: one type per place
        if len(value) != len(args):
            raise _Refused(f"{where} {_show(value)} does not have {len(args)} items")
        return tuple(_checked(h, v, f"{where}[{i}]") for i, (h, v) in enumerate(zip(args, value, strict=True)))
    item = args[0] if args else Any
    items = [_checked(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return tuple(items) if origin is tuple else items


def _mapping(hint: Any, value: object, where: str) -> object:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _Refused(f"{where} {_show(value)} is not an object")
    args = get_args(hint)
    item = args[1] if len(args) == 2 else Any
    return {k: _checked(item, v, f"{where}.{k}") for k, v in value.items()}


def _typed_dict(kind: Any, data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise _Refused(f"{_show(data)} is not an object")
    hints = typing.get_type_hints(kind)
    missing = sorted(kind.__required_keys__ - set(data))
    if missing:
        raise _Refused(f"field {missing[0]!r} is missing")
    unknown = sorted(set(data) - set(hints), key=str)
    if unknown:
        raise _Refused(f"unknown field {_show(unknown[0])}")
    return {k: _checked(hints[k], v, k) for k, v in data.items()}


def _plain(value: object, where: str) -> object:
    """``value`` as JSON data: a nested message as its fields, a tuple as a list."""
    if is_message(value):
        return to_json(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, where) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"{where}: a {type(value).__name__} has no JSON form: {_show(value)}")


def _json_problem(value: object, depth: int = 0) -> str | None:
    """Why ``value`` is not plain JSON (finite numbers, string keys, at most 32 levels deep)."""
    if depth > 32:
        return "is nested more than 32 levels deep"
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return "has an object key that is not a string"
        return next(filter(None, (_json_problem(v, depth + 1) for v in value.values())), None)
    if isinstance(value, list):
        return next(filter(None, (_json_problem(v, depth + 1) for v in value)), None)
    if isinstance(value, float) and math.isnan(value):
        return "holds NaN"
    if value is not None and not isinstance(value, (str, int, float)):
        return f"holds a {type(value).__name__}"
    return None


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
