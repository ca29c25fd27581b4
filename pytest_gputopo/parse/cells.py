"""Cells of the tables other tools print, read strictly: a bounded integer or float (``N/A``, NaN
and infinity are "not printed", with a note), a ``%g`` count, an identifier. A cell that is not of
its column's kind raises ``BadCell``."""

from __future__ import annotations

import math
import re

INT_RE = re.compile(r"[+-]?\d{1,19}")  # 19 digits: every real count fits; int() never sees a huge string
FLOAT_RE = re.compile(r"[+-]?(?:\d{1,30}(?:\.\d{0,30})?|\.\d{1,30})(?:[eE][+-]?\d{1,4})?")
NAN_RE = re.compile(r"[+-]?(?:nan|inf)", re.IGNORECASE)  # printf of a 0/0 or x/0
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
NA = "N/A"


class BadCell(Exception):
    """A token that is not of its column's kind."""


def cell_int(tok: str) -> int:
    if not INT_RE.fullmatch(tok):
        raise BadCell(tok)
    return int(tok)


def cell_float(tok: str, notes: list[str]) -> float | None:
    if tok == NA:
        return None
    if NAN_RE.fullmatch(tok):
        notes.append(f"a cell reads {tok!r}; read as not printed")
        return None
    if not FLOAT_RE.fullmatch(tok):
        raise BadCell(tok)
    value = float(tok)
    if not math.isfinite(value):
        notes.append(f"a cell reads {tok!r}; read as not printed")
        return None
    return value


def cell_count(tok: str, notes: list[str]) -> int | None:
    """A ``#wrong`` cell: printed with ``%6g`` (src/util.cu writeBenchmarkLineBody), so a count from
    a million up reads like ``1.04858e+06``; None when not checked (``N/A``, -1)."""
    if tok == NA:
        return None
    if INT_RE.fullmatch(tok):
        return int(tok) if int(tok) >= 0 else None
    value = cell_float(tok, notes)
    return None if value is None or value < 0 else round(value)


def cell_ident(tok: str) -> str:
    if not IDENT_RE.fullmatch(tok):
        raise BadCell(tok)
    return tok
