"""CPU lists as nvidia-smi prints a GPU's CPU affinity: ``0-23,48-71``."""

from __future__ import annotations

import re

from .limits import MAX_CPUS

_RANGE_RE = re.compile(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?")


def looks_like_cpu_list(text: str) -> bool:
    """Whether ``text`` is written as a CPU list at all (``N/A`` is not: it says nothing)."""
    return all(_RANGE_RE.fullmatch(part) for part in text.split(","))


def cpu_ranges(text: str | None) -> list[tuple[int, int]] | None:
    """The inclusive CPU ranges of a list; None when unknown (None, ``N/A``) or naming CPUs no
    machine has (a range backwards, or at ``MAX_CPUS`` and above)."""
    if not text or not looks_like_cpu_list(text):
        return None
    ranges = []
    for part in text.split(","):
        m = _RANGE_RE.fullmatch(part)
        if max(len(m.group(1)), len(m.group(2) or "")) > 9:  # type: ignore[union-attr]  # every part matched above
            return None  # never int() of a 5,000-digit string
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))  # type: ignore[union-attr]  # as above
        if not lo <= hi < MAX_CPUS:
            return None
        ranges.append((lo, hi))
    return ranges


def cpu_set(text: str | None) -> set[int] | None:
    ranges = cpu_ranges(text)
    return None if ranges is None else {cpu for lo, hi in ranges for cpu in range(lo, hi + 1)}


def cpu_mask(text: str | None) -> int | None:
    """The list as a bitmask (bit i: CPU i), as NVML's ``nvmlDeviceGetCpuAffinity`` gives it."""
    ranges = cpu_ranges(text)
    return None if not ranges else sum(((1 << (hi - lo + 1)) - 1) << lo for lo, hi in ranges)
