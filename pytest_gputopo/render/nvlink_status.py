"""``nvidia-smi nvlink -s``'s own text for a status: the inverse of ``parse.nvlink_status``. For
fixtures and tests, never a measurement: a text written here says what it was given, nothing a
GPU reported."""

from __future__ import annotations

import math

from ..parse.nvlink_status import ALL_INACTIVE_LINE, NvlinkStatus

__all__ = ["render_nvlink_status", "format_gbps"]

INDENT = "\t "  # nvidia-smi indents each line under a GPU with a tab and a space


def format_gbps(gbps: float) -> str:
    """A speed as nvidia-smi prints it: ``25`` for 25.0, ``25.781`` otherwise. The shortest form
    that reads back as the same float (``repr``), so a parsed speed is written as it was printed."""
    text = repr(float(gbps))
    return text[:-2] if text.endswith(".0") else text


def render_nvlink_status(status: NvlinkStatus) -> str:
    """The text ``nvidia-smi nvlink -s`` prints for ``status``: per GPU its header, the all-inactive
    line when set, then one line per link in order (``warnings`` are not shown). Raises ValueError
    for a link nvidia-smi could not print: active with no positive finite speed."""
    out: list[str] = []
    for gpu in status.gpus:
        head = [f"GPU {gpu.index}:"] + ([gpu.name] if gpu.name else []) + ([f"(UUID: {gpu.uuid})"] if gpu.uuid else [])
        out.append(" ".join(head))
        if gpu.all_inactive:
            out.append(INDENT + ALL_INACTIVE_LINE)
        for link in gpu.links:
            if not link.active:
                out.append(f"{INDENT}Link {link.link}: <inactive>")
                continue
            if link.gbps is None or not math.isfinite(link.gbps) or link.gbps <= 0:
                raise ValueError(
                    f"render_nvlink_status: GPU {gpu.index} link {link.link} is active with speed "
                    f"{link.gbps!r}, which nvidia-smi never prints"
                )
            out.append(f"{INDENT}Link {link.link}: {format_gbps(link.gbps)} GB/s")
    return "\n".join(out) + "\n" if out else ""
