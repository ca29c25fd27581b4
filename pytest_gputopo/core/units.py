"""Units as the plugin writes them: sizes in binary units (as nccl-tests reads ``-b 1G``), exact."""

from __future__ import annotations

KIB, MIB, GIB = 2**10, 2**20, 2**30


def size_text(n: int) -> str:
    """``1 GiB``, ``64 MiB``, ``4 KiB``; a size no unit divides in bytes (``1572868 B``): a label names
    exactly what was measured."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"
