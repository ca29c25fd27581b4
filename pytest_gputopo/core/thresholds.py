"""The share of the expected figure a healthy machine must reach (the efficiency floors) and how a
figure is written in messages. A threshold and a figure against it are ``core.judgement``'s
(``Threshold``, ``Judgement``, the rule ``threshold``); the published per-SKU floors are in
``core.collectives``."""

from __future__ import annotations

import math
from collections.abc import Mapping

# ---------------------------------------------------------------------------------------------
# Efficiency floors: the share of the expected figure a healthy machine must reach. Each is set below
# every healthy public measurement and at or below the most lenient public operator floor, and far above
# what the failures it exists to catch produce (PCIe fallback of an NVLink pair <= 0.14, NUMA-remote H2D
# 0.24, SHM fallback on a partial NVLink node 0.07):
#
# p2p (copies over NVLink or PCIe)  0.70: healthy 0.81-0.92 of the per-direction line rate (H100 364-393 of
#     450, H200 396 = 0.88, GB200 744 of 900 = 0.83, A100 272-277 of 300, A40 bridge 101.6 of 112.5
#     bidirectional); Azure's P2P floors are 0.74 (H100 335/450, lowered from 350 on 2024-06-28) and 0.78
#     (A100 235/300); ml-engineering's "~80% of the unidirectional spec" is the typical value, not a floor;
#     DCGM's "measured x 0.75" convention gives 0.63-0.69.
# h2d_pinned 0.65: healthy 0.77-0.88 (P100 Gen3 12.15/15.75, A100 Gen4 25.7/31.5, H200 Gen5 55.43/63,
#     EngineersOfAI's sample 27.8/31.5); operator floors: Azure ND A100 v4 21/31.5 = 0.67 (the most lenient),
#     Azure H100 48/63 = 0.76, OCI 52/63 = 0.83.
# h2d_pageable 0.5 of min(line/2, 12): healthy 0.71-0.97 (DGX A100 10.0 and 10.8 of 12, EngineersOfAI's
#     sample 11.6 and 10.9, Dell A100 PCIe D2H 8.5); pageable speed depends on the host CPU and memory, hence the
#     widest slack. (Dell's H2D 3.3 fails, as does its pinned H2D 17.3: a host worth a look.)
# allreduce 0.60: ring busbw is 0.73-0.82 of the line rate (A100 220-235/300, H100/H200 ring 367-370/450,
#     B200 ring 682/900); OCI's A100 floor is 185/300 = 0.62; DCGM's "x 0.75" of a typical 0.78 is 0.59.
#     Two GPUs on an NVLink bridge measure less (2x H100 PCIe 116 GB/s, nccl#1161; 2x A100 72 of 100,
#     nccl-tests#331): lower the floor for those (docs/thresholds.md).
DEFAULT_FLOORS: dict[str, float] = {"p2p": 0.70, "h2d_pinned": 0.65, "h2d_pageable": 0.50, "allreduce": 0.60}
FLOOR_KEYS = tuple(DEFAULT_FLOORS)
_FLOOR_MAX = 2.0  # NVLS busbw can exceed the line rate (480 of 450): a floor above 1 is legitimate


def parse_floor_ratio(value: object, where: str) -> float:
    """A floor override (ini, env, CLI or marker) as a float in (0, 2]; ``where`` names its origin in errors."""
    try:
        ratio = float(value.strip()) if isinstance(value, str) else float(value)  # type: ignore[arg-type]
        if isinstance(value, bool):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(
            f"{where}: expected a number such as 0.8 (a share of the expected bandwidth), got {value!r}"
        ) from None
    if not (math.isfinite(ratio) and 0 < ratio <= _FLOOR_MAX):
        raise ValueError(
            f"{where}: floor must be > 0 and <= {_FLOOR_MAX:g} (a share of the expected bandwidth), got {value!r}"
        )
    return ratio


def gbps_text(gbps: float) -> str:
    """One decimal for GPU-sized figures, three significant digits for the small ones of CPUs."""
    return f"{gbps:.1f}" if gbps >= 10 else f"{gbps:.3g}"


def interval_text(interval: tuple[float, float]) -> str:
    """A measured figure's 95% interval, as messages print it."""
    return f"95% interval {gbps_text(interval[0])}-{gbps_text(interval[1])}"


def merged_floors(overrides: Mapping[str, object] | None = None, where: str = "floors") -> dict[str, float]:
    """``DEFAULT_FLOORS`` with validated overrides (unknown keys are an error naming ``where``)."""
    floors = dict(DEFAULT_FLOORS)
    for key, value in (overrides or {}).items():
        if key not in floors:
            raise ValueError(f"{where}: unknown floor {key!r} (known: {', '.join(FLOOR_KEYS)})")
        floors[key] = parse_floor_ratio(value, f"{where}: {key}")
    return floors
