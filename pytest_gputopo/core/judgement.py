"""One measured figure against its threshold: the one rule a ``min_*_bw`` marker, a health-check item
and a run gate share, so that the same figure gets the same verdict wherever it is judged.

The threshold is an absolute figure when there is one (a marker's ``gbps``, or a published per-SKU
floor), else ``floor_ratio`` x the figure the link should give (``thresholds.Check`` compares). A figure
is then:

- ``absent``: there is none (a recorded machine that published none, a pair without peer access);
- ``broken``: its data came back wrong (a broken node, whatever the figure);
- ``unknown``: nothing says what it should reach (no expected figure): never "assumed OK";
- ``below``: under the threshold;
- ``staged``: a P2P copy that reaches its threshold but is slower than the same copy staged
  through the host: it is not getting P2P;
- ``met``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import Figure
from .thresholds import Check, gbps_text, interval_text

ABSENT, BROKEN, UNKNOWN, BELOW, STAGED, MET = "absent", "broken", "unknown", "below", "staged", "met"


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
    expected: Figure | None  # what the link should give, None when unknown
    basis: str  # what the expectation rests on, in words
    floor_ratio: float
    absolute: Figure | None = None  # the marker's gbps or a published floor: the threshold itself
    set_by: str = ""  # what sets an absolute threshold that is not the marker's own, for messages
    staged_gbps: float | None = None  # a P2P copy's twin staged through the host, where measured

    def check(self) -> Check | None:
        """The figure as ``thresholds.Check`` compares and describes it (None without a figure)."""
        if self.measured.gbps is None:
            return None
        return Check(self.measured.gbps, self.expected, self.floor_ratio, self.absolute)

    @property
    def needed_gbps(self) -> float | None:
        if self.absolute is not None:
            return self.absolute.gbps
        return None if self.expected is None else self.floor_ratio * self.expected.gbps

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
