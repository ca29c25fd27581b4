"""One reader of numbers written as text, for every surface: options, environment variables,
``--gputopo-require``, ``CUDA_VISIBLE_DEVICES``. ASCII digits only, finite, within a stated range.

Python's own readers are too generous for input: ``"²".isdigit()`` is true and ``int("²")`` raises,
``int("١٢")`` is 12, ``int`` refuses more than 4,300 digits with ValueError, ``float("nan")`` and
``float("1e999")`` are numbers. None of those is a number here."""

from __future__ import annotations

import math
import re

_INT_RE = re.compile(r"[+-]?[0-9]{1,18}")
_DECIMAL_RE = re.compile(r"[+-]?([0-9]{1,18}(\.[0-9]{0,18})?|\.[0-9]{1,18})([eE][+-]?[0-9]{1,3})?")


def read_int(text: str, low: int, high: int) -> int | None:
    """The integer ``text`` spells in ASCII digits (blanks around allowed), or None when it spells
    none or one outside ``low..high``."""
    text = text.strip()
    if not _INT_RE.fullmatch(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


def read_number(text: str, low: float, high: float, *, above_low: bool = False) -> float | None:
    """The finite number ``text`` spells (``12``, ``0.5``, ``1e3``), or None when it spells none or
    one outside the range (``low`` excluded when ``above_low``)."""
    text = text.strip()
    if not _DECIMAL_RE.fullmatch(text):
        return None
    value = float(text)
    if not math.isfinite(value) or value > high or value < low or (above_low and value == low):
        return None
    return value
