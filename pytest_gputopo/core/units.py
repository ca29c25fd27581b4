"""Units as the plugin writes them: sizes in binary units (as nccl-tests reads ``-b 1G``), exact; counts
with their noun agreeing (``1 test``, ``2 tests``)."""

from __future__ import annotations

import re

KIB, MIB, GIB = 2**10, 2**20, 2**30


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 test``, ``0 tests``, ``3 more pairs`` (noun ``"more pair"``): a count and its noun, singular
    for one only; ``plural`` where adding an s is wrong (``"entry"``, ``"entries"``)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def size_text(n: int) -> str:
    """``1 GiB``, ``64 MiB``, ``4 KiB``; a size no unit divides in bytes (``1572868 B``): a label names
    exactly what was measured."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


_UNITS = {
    "": 1,
    "B": 1,
    "K": KIB,
    "KB": KIB,
    "KIB": KIB,
    "M": MIB,
    "MB": MIB,
    "MIB": MIB,
    "G": GIB,
    "GB": GIB,
    "GIB": GIB,
}


def read_size(text: str, low: int, high: int) -> int | None:
    """The size in bytes ``text`` spells -- ``1073741824``, ``1G``, ``256M``, ``64k`` (binary units, as
    nccl-tests reads ``-b``/``-e``) -- or None when it spells none or one outside ``low..high``."""
    m = re.fullmatch(r"([0-9]{1,16})([KMG]?I?B?)", text.strip().upper())
    if not m or m.group(2) not in _UNITS:
        return None
    value = int(m.group(1)) * _UNITS[m.group(2)]
    return value if low <= value <= high else None
