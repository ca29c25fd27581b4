"""One measured figure against its threshold: the one rule a ``min_*_bw`` marker, a health-check item
and the run's report share, so that the same figure gets the same verdict wherever it is judged or shown.

``threshold`` picks what a figure must reach (pure: the run's lookups -- what the link should give,
the run's floors, the GPU model -- are its caller's, ``plugin.verdicts``): the marker's ``gbps``; else
a published per-SKU floor (the all-reduce of a full node, unless the user set a floor; not one that
assumes NVLink SHARP when NCCL did without it); else the floor ratio (the marker's, else the run's)
x what the link should give. A ``Judgement`` is the only source of a figure's ``state`` and
``needed_gbps``; the report writes both into each measurement (``document``) for renderers to read.
A figure is:

- ``absent``: there is none (a recorded machine that published none, a pair without peer access);
- ``broken``: its data came back wrong (a broken node, whatever the figure);
- ``unknown``: nothing says what it should reach (no expected figure): never "assumed OK";
- ``below``: under the threshold;
- ``staged``: a P2P copy that reaches its threshold but is slower than the same copy staged
  through the host: it is not getting P2P;
- ``met``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from . import keys
from .collectives import sku_allreduce_floor
from .figure_states import (  # the words, re-exported: the judges name them as this module's
    ABSENT as ABSENT,
    BELOW as BELOW,
    BROKEN as BROKEN,
    MET as MET,
    STAGED as STAGED,
    STATES as STATES,
    UNKNOWN as UNKNOWN,
)
from .spec import Figure
from .thresholds import gbps_text, interval_text, parse_floor_ratio


@dataclass(frozen=True)
class Threshold:
    """What a figure must reach: ``absolute`` where there is one (the marker's ``gbps``, a published
    floor), else ``floor_ratio`` x ``expected``; ``basis`` says what the expectation rests on and
    ``set_by`` what sets an absolute threshold that is not the marker's own, for messages."""

    expected: Figure | None
    basis: str
    floor_ratio: float
    absolute: Figure | None = None
    set_by: str = ""

    def __post_init__(self) -> None:
        parse_floor_ratio(self.floor_ratio, "Threshold.floor_ratio")

    @property
    def needed_gbps(self) -> float | None:
        """``absolute`` where there is one (the ratio is then not applied), else ``floor_ratio`` x
        ``expected``; None when neither is known (nothing to judge by). A caller whose user set the
        floor passes no published ``absolute``, so that the user's ratio rules (``threshold``)."""
        if self.absolute is not None:
            return self.absolute.gbps
        return None if self.expected is None else self.floor_ratio * self.expected.gbps


def threshold(
    key: keys.Key,
    expected: Figure | None,
    basis: str,
    floors: Mapping[str, float],
    explicit: Collection[str],
    gpu_name: str | None,
    *,
    size_bytes: int | None = None,
    nvls: bool | None = None,
    gbps: float | None = None,
    floor: float | None = None,
    one_node: bool = True,
) -> Threshold:
    """The one threshold rule. ``expected``/``basis``: what the link should give; ``floors``: the
    run's floor ratios by kind, ``explicit`` the ones the user set; ``gpu_name``: the first GPU's
    model (None: none known); ``size_bytes``: the size an all-reduce was taken at; ``nvls``: whether
    NCCL took NVLink SHARP (None: not known); ``gbps``, ``floor``: the marker's own arguments;
    ``one_node``: whether an all-reduce's ranks all ran on the one node of ``gpu_name``'s GPUs (a
    published floor is a full node's: none across nodes, where the network binds)."""
    kind = getattr(key, "floor", None)  # NCCL's account and the staged twin have none: never judged
    if kind is None:
        raise ValueError(f"{key.describe()}: no floor of its own; it is not judged")
    ratio = floor if floor is not None else floors[kind]
    if gbps is not None:
        return Threshold(expected, basis, ratio, Figure(gbps, "the marker", f"the marker's {gbps:g} GB/s"))
    published = None
    if isinstance(key, keys.AllReduce) and floor is None and key.floor not in explicit and one_node:
        published = sku_allreduce_floor(gpu_name, key.ranks, size_bytes or key.size_bytes, nvls)
    set_by = f"published {published.label or published.source}" if published is not None else ""
    return Threshold(expected, basis, ratio, published, set_by)


@dataclass(frozen=True)
class Measured:
    """A bandwidth as the run has it: ``gbps`` (None: no figure) with where it came from."""

    gbps: float | None
    origin: str  # "measured", "recorded" (published for the machine), "cached"
    what: str = ""
    source: str | None = None  # where a recorded figure was published
    error: str | None = None  # why there is no figure, or what was wrong with its data
    interval: tuple[float, float] | None = None  # 95% interval of a measured gbps

    def text(self) -> str:
        """E.g. ``measured 1.2 GB/s (95% interval 1.15-1.27)``, ``recorded 234.9 GB/s``."""
        text = f"{self.origin} {gbps_text(self.gbps)} GB/s"  # type: ignore[arg-type]  # asked of a figure there is
        return text + (f" ({interval_text(self.interval)})" if self.interval else "")


@dataclass(frozen=True)
class Judgement:
    measured: Measured
    threshold: Threshold
    staged_gbps: float | None = None  # a P2P copy's twin staged through the host, where measured

    @property
    def needed_gbps(self) -> float | None:
        return self.threshold.needed_gbps

    def _gbps(self) -> float:
        """The figure, which must be a bandwidth to be judged or described (a broken one is neither)."""
        m = self.measured.gbps
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m < 0:
            raise ValueError(f"a measurement must be a finite bandwidth >= 0 GB/s, got {m!r}")
        return m

    def ratio(self) -> float | None:
        """Measured / expected (None without an expectation, or for an expectation of 0)."""
        exp = self.threshold.expected
        return None if exp is None or exp.gbps == 0 else self._gbps() / exp.gbps

    def describe(self) -> str:
        """The figure against its threshold in one line, e.g. "measured 231.4 GB/s, needed 180.0 (0.80 x
        expected 225.0 GB/s from NV12 NVLink 3.1), ratio 1.03" (for a figure there is)."""
        th = self.threshold
        text = f"measured {gbps_text(self._gbps())} GB/s"
        exp = th.expected
        exp_text = f"expected {gbps_text(exp.gbps)} GB/s from {exp.label or exp.source}" if exp is not None else None
        ratio = self.ratio()
        if th.absolute is not None:
            floor = th.absolute
            text += f", needed {gbps_text(floor.gbps)} (published {floor.label or floor.source})"
            if exp_text:
                text += f", {exp_text}, ratio {ratio:.2f}" if ratio is not None else f", {exp_text}"
            return text
        needed = self.needed_gbps  # floor x expected here: None only without an expected figure
        if needed is None:
            return text + ", no expected figure for this link (not judged)"
        text += f", needed {gbps_text(needed)} ({th.floor_ratio:.2f} x {exp_text})"
        return text + (f", ratio {ratio:.2f}" if ratio is not None else "")

    @property
    def state(self) -> str:
        if self.measured.gbps is None:
            return ABSENT
        if self.measured.error:
            return BROKEN
        gbps, needed = self._gbps(), self.needed_gbps
        passed = None if needed is None else gbps >= needed
        if passed is None:
            return UNKNOWN
        if not passed:
            return BELOW
        if self.staged_gbps is not None and self.staged_gbps > self.measured.gbps:
            return STAGED
        return MET

    def document(self) -> dict[str, Any]:
        """The verdict as the report's measurement entry holds it, for renderers to read: ``state``,
        the staged twin's figure where it decided, and ``expected`` (``gbps``, ``basis``, ``floor``,
        ``needed_gbps``)."""
        th = self.threshold
        expected = {
            "gbps": None if th.expected is None else th.expected.gbps,
            "basis": th.basis,
            "floor": th.floor_ratio,
            "needed_gbps": self.needed_gbps,
        }
        state = self.state
        return {"state": state, "expected": expected, **({"staged_gbps": self.staged_gbps} if state == STAGED else {})}
