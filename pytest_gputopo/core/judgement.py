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

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from . import keys
from .collectives import sku_allreduce_floor
from .spec import Figure
from .thresholds import Check, gbps_text, interval_text, needed_gbps

ABSENT, BROKEN, UNKNOWN, BELOW, STAGED, MET = "absent", "broken", "unknown", "below", "staged", "met"
STATES = (ABSENT, BROKEN, UNKNOWN, BELOW, STAGED, MET)


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

    @property
    def needed_gbps(self) -> float | None:
        return needed_gbps(self.expected, self.floor_ratio, self.absolute)


def threshold(key: keys.Key, expected: Figure | None, basis: str, floors: Mapping[str, float],
              explicit: Collection[str], gpu_name: str | None, *, size_bytes: int | None = None,
              nvls: bool | None = None, gbps: float | None = None, floor: float | None = None) -> Threshold:
    """The one threshold rule. ``expected``/``basis``: what the link should give; ``floors``: the
    run's floor ratios by kind, ``explicit`` the ones the user set; ``gpu_name``: the first GPU's
    model (None: none known); ``size_bytes``: the size an all-reduce was taken at; ``nvls``: whether
    NCCL took NVLink SHARP (None: not known); ``gbps``, ``floor``: the marker's own arguments."""
    ratio = floor if floor is not None else floors[key.floor]
    if gbps is not None:
        return Threshold(expected, basis, ratio, Figure(gbps, "the marker", f"the marker's {gbps:g} GB/s"))
    published = None
    if isinstance(key, keys.AllReduce) and floor is None and key.floor not in explicit:
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
        text = f"{self.origin} {gbps_text(self.gbps)} GB/s"
        return text + (f" ({interval_text(self.interval)})" if self.interval else "")


@dataclass(frozen=True)
class Judgement:
    measured: Measured
    threshold: Threshold
    staged_gbps: float | None = None  # a P2P copy's twin staged through the host, where measured

    @property
    def needed_gbps(self) -> float | None:
        return self.threshold.needed_gbps

    def check(self) -> Check | None:
        """The figure as ``thresholds.Check`` compares and describes it (None without a figure)."""
        if self.measured.gbps is None:
            return None
        th = self.threshold
        return Check(self.measured.gbps, th.expected, th.floor_ratio, th.absolute)

    @property
    def state(self) -> str:
        if self.measured.gbps is None:
            return ABSENT
        if self.measured.error:
            return BROKEN
        passed = self.check().passed()
        if passed is None:
            return UNKNOWN
        if not passed:
            return BELOW
        if self.staged_gbps is not None and self.staged_gbps > self.measured.gbps:
            return STAGED
        return MET

    def document(self) -> dict:
        """The verdict as the report's measurement entry holds it, for renderers to read: ``state``,
        the staged twin's figure where it decided, and ``expected`` (``gbps``, ``basis``, ``floor``,
        ``needed_gbps``)."""
        th = self.threshold
        expected = {"gbps": None if th.expected is None else th.expected.gbps, "basis": th.basis,
                    "floor": th.floor_ratio, "needed_gbps": self.needed_gbps}
        state = self.state
        return {"state": state, "expected": expected,
                **({"staged_gbps": self.staged_gbps} if state == STAGED else {})}
