"""A benchmark's result as a run keeps it (``BenchSuite.get``), caches it and shares it between its
processes: its JSON form, read back only when whole and sound (``bench.untrusted``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core import keys
from . import untrusted


@dataclass(frozen=True)
class BenchResult:
    key: keys.Key
    what: str  # "all-reduce busbw, 8 ranks (nccl), 1 GiB"
    gbps: float | None
    origin: str  # "measured", "recorded" (published for a recorded machine), "cached" (measured earlier),
    # or ``suite.PLANNED`` (a plan's stand-in for a measurement it does not make)
    source: str | None = None  # where a recorded figure was published
    error: str | None = None  # why there is no figure, or why the measurement failed
    detail: dict = field(default_factory=dict, compare=False)  # the measurement, with units

    @property
    def interval_gbps(self) -> tuple[float, float] | None:
        """The 95% interval of ``gbps`` where the harness measured it (not for recorded figures, nor
        nccl-tests' own output)."""
        found = self.detail.get("bw_ci95_gbps") or self.detail.get("judged", {}).get("busbw_ci95_gbps")
        return tuple(found) if found else None

    def to_json(self) -> dict:
        return {
            "key": self.key.to_list(),
            "what": self.what,
            "gbps": self.gbps,
            "origin": self.origin,
            "source": self.source,
            "error": self.error,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, d: Any) -> BenchResult:
        """The result another process of this run wrote; ValueError says why it cannot be trusted."""
        problem = untrusted.result_problem(d)
        if problem:
            raise ValueError(problem)
        return cls(
            keys.from_list(d["key"]),
            d["what"],
            d["gbps"],
            d["origin"],
            d.get("source"),
            d.get("error"),
            d.get("detail", {}),
        )
