"""An engine double for the emulated GPU host: the figures a healthy node of a bundled machine measures,
for every kind a full check measures, as public measurements give them. Handed to the real benchmarks
through the project's test-only plan (``runtime.environ.test_faults``): the copy child answers each
copy from ``copy_gbps`` (by copy, then by kind) and the all-reduce workers time their collective on a
clock that runs at ``allreduce_busbw_gbps``; everything else -- the suite, the check items, the
judgement, the report writer -- runs as on a real node.

Sources (``../shared/reference/benchmarks-and-thresholds.md`` cites each):

- HGX H100: P2P 376 GB/s one way (ml-engineering network/README.md: 8x H100 SXM 364-393, typical
  376), both ways 745 (NVIDIA/nccl #1264: HGX H100 741-749 for most pairs), host copies pinned 55.33
  H2D and 55.18 D2H (the bundled profile's published nvbandwidth figures), all-reduce busbw 370 at
  1 GiB on 8 ranks (nccl-tests #212, sjeaugey: ring ~370; NVLS ~480 is no link's rate).
- DGX A100: P2P 272 (ml-engineering: 8x A100 SXM 272-277), both ways 475 (nccl-tests #149: HPE
  Apollo 8x A100 430-520), pinned 25.7 H2D and 25.8 D2H, pageable 10.0 H2D and 10.8 D2H (gengwg/gpu
  nvda_gpu_benchmark.md, DGX A100 bandwidthTest), all-reduce 230 (nccl-tests #149, sjeaugey).
- Pageable host copies on a PCIe Gen5 host are published nowhere (the reference says so): the H100's
  are the DGX A100's, a host-bound figure under the 12 GB/s pageable ceiling on either.
- The staged twin (``p2p_staged``) is derived, not published: ``bench.copies.p2p_copy`` stages a copy
  as a D2H then an H2D through one pinned buffer, unpipelined, so it moves at 1 / (1/H2D + 1/D2H).
"""

from __future__ import annotations

import json


def _staged(h2d: float, d2h: float) -> float:
    return round(1 / (1 / h2d + 1 / d2h), 2)


FIGURES: dict[str, dict[str, float]] = {
    "hgx-h100": {
        "p2p": 376.0,
        "p2p_bidir": 745.0,
        "p2p_staged": _staged(55.33, 55.18),
        "h2d": 55.33,
        "d2h": 55.18,
        "h2d_pageable": 10.0,
        "d2h_pageable": 10.8,
        "allreduce": 370.0,
    },
    "dgx-a100": {
        "p2p": 272.0,
        "p2p_bidir": 475.0,
        "p2p_staged": _staged(25.7, 25.8),
        "h2d": 25.7,
        "d2h": 25.8,
        "h2d_pageable": 10.0,
        "d2h_pageable": 10.8,
        "allreduce": 230.0,
    },
}
MACHINES = tuple(FIGURES)


def plan(machine: str, *, slow: dict[str, float] | None = None, wrong: tuple[str, ...] = ()) -> str:
    """``PYTEST_GPUTOPO_TEST_FAULTS`` for a healthy node of ``machine`` (a bundled name); ``slow``:
    copies (``keys.name_of``) at another figure, in GB/s, or as a share of their kind's where under 1;
    ``wrong``: copies whose data come back wrong."""
    figures = dict(FIGURES[machine])
    busbw = figures.pop("allreduce")
    for name, gbps in (slow or {}).items():
        figures[name] = gbps * figures[name.split("-")[0]] if gbps < 1 else gbps
    return json.dumps({"copy_gbps": figures, "copy_wrong": list(wrong), "allreduce_busbw_gbps": busbw})
