"""The table ``gputopo spec`` prints and docs/thresholds.md reproduces: every figure the rules use,
with its source."""

from __future__ import annotations

from .collectives import sku_allreduce_floor
from .spec import GA102_CC, NVLINK_GA102, NVLINK_PER_LINK, PAGEABLE_CEILING, PCIE_X16, Figure, format_gbps, nvlink_gbps

_PER_GPU = (
    ("P100 (NVLink 1.0 x 4)", "1.0", 4, None),
    ("V100 (NVLink 2.0 x 6)", "2.0", 6, None),
    ("A100 (NVLink 3.x x 12)", "3.1", 12, None),
    ("RTX 3090 / RTX A6000 / A40 bridge (NVLink 3.x GA102 x 4)", "3.1", 4, GA102_CC),
    ("H100 / H200 (NVLink 4.0 x 18)", "4.0", 18, None),
    ("B200 / GB200 (NVLink 5.0 x 18)", "5.0", 18, None),
)

_SKU_EXAMPLES = (
    ("Tesla V100-SXM2-32GB", "V100 SXM2"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA B300 SXM6 AC", "B300"),
)


def table_rows() -> list[tuple[str, str, Figure]]:
    """(category, item, figure) for every figure the rules use."""
    rows: list[tuple[str, str, Figure]] = []
    for gen in sorted(PCIE_X16):
        rows.append(("PCIe, x16, per direction", f"Gen{gen}", PCIE_X16[gen]))
    for version, fig in NVLINK_PER_LINK.items():
        rows.append(("NVLink, per link, per direction", version, fig))
    rows.append(("NVLink, per link, per direction", "3.x on GA102 (compute capability 8.6)", NVLINK_GA102))
    for item, version, links, cc in _PER_GPU:
        rows.append(("NVLink, per GPU, per direction", item, nvlink_gbps(version, links, cc)))
    rows.append(("Host<->device", "pageable staging ceiling", PAGEABLE_CEILING))
    for name, item in _SKU_EXAMPLES:
        floor = sku_allreduce_floor(name, 8)
        assert floor is not None, name
        rows.append(("All-reduce busbw floor, 8 GPUs, >= 8 GiB", f"{item} ({name})", floor))
    return rows


def markdown_table() -> str:  # used to write docs/thresholds.md; the tests compare the two
    lines = ["| category | item | GB/s | source |", "|---|---|---|---|"]
    for cat, item, fig in table_rows():
        lines.append(f"| {cat} | {item} | {format_gbps(fig.gbps)} | {fig.source} |")
    return "\n".join(lines)
