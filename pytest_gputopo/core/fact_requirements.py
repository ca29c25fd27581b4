"""Requirements judged on facts a run gathers beyond the topology: measured (or, for a recorded
machine, published) figures against their thresholds (``min_<metric>_bw``), NCCL's transports
(``requires_nccl_transport``) and the run gate ``no-fallback``. The plugin gathers the facts and calls
each one's ``judge``; the judges (``core.judgement``, ``core.thresholds``) and the benchmarks' keys
load only when a bandwidth requirement is judged (the load budget: docs/performance.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .causes import Unknown
from .limits import MAX_BYTES, MAX_GBPS, is_bandwidth, show_value
from .model import ALL_FACTS, Topology
from .requirements import (
    REASON_PAIRS,
    Gpus,
    Requirement,
    RequirementError,
    Verdict,
    gpus_kw,
    gpus_text,
    int_arg,
    link_text,
    listed,
    mig_pair,
    shortfall,
    unmet,
    visible_text,
)

if TYPE_CHECKING:
    from . import judgement, keys

TRANSPORT_KINDS = ("P2P", "SHM", "NET", "NET/IB", "NET/Socket", "NVLS", "COLLNET")
METRICS = ("allreduce", "p2p", "h2d")


@dataclass(frozen=True)
class FactRequirement(Requirement):
    """Judged on facts beyond the topology (measurements, NCCL's account): the plugin gathers them
    and calls ``judge``; ``evaluate`` alone cannot decide."""

    facts = ALL_FACTS  # a measurement starts CUDA anyway; NCCL's rules read every fact

    def evaluate(self, topology: Topology, max_pairs: int | None = REASON_PAIRS) -> Verdict:
        raise TypeError(f"{self} is judged on measurements; use judge()")


@dataclass(frozen=True)
class BandwidthRequirement(FactRequirement):
    """``min_<metric>_bw``: every measurement behind it reaches ``gbps`` (or, when ``gbps`` is None,
    ``floor`` x the bandwidth the link is expected to give)."""

    metric: str = "allreduce"  # allreduce, p2p, h2d
    gbps: float | None = None
    size: int | None = None
    pinned: bool = True
    floor: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.metric not in METRICS:
            raise RequirementError(f"metric must be one of {', '.join(METRICS)}, got {self.metric!r}")
        if self.metric == "allreduce" and isinstance(self.gpus, tuple) and len(self.gpus) < 2:
            raise RequirementError(f"an all-reduce needs at least 2 GPUs, got the list {gpus_text(self.gpus)}")
        if self.gbps is not None and not is_bandwidth(self.gbps):
            raise RequirementError(
                f"gbps must be a number above 0 and at most {MAX_GBPS:g} (GB/s = 1e9 B/s) "
                f"or None, got {show_value(self.gbps)}"
            )
        if self.floor is not None and (
            isinstance(self.floor, bool) or not isinstance(self.floor, (int, float)) or not 0 < self.floor <= 2
        ):
            raise RequirementError(
                f"floor must be a fraction of the expected bandwidth in (0, 2], got {show_value(self.floor)}"
            )
        if self.size is not None:
            int_arg(self.size, "size (bytes)", 4, MAX_BYTES)
        if not isinstance(self.pinned, bool):
            raise RequirementError(f"pinned must be True or False, got {self.pinned!r}")
        for name in ("gbps", "floor"):  # 50 and 50.0 are one requirement
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))

    def __str__(self) -> str:
        args = [] if self.gbps is None else [f"{self.gbps:g}"]
        args += gpus_kw(self.gpus)
        args += [f"size={self.size}"] if self.size else []
        args += ["pinned=False"] if self.metric == "h2d" and not self.pinned else []
        args += [f"floor={self.floor:g}"] if self.floor is not None else []
        return f"min_{self.metric}_bw({', '.join(args)})"

    def measurements(
        self, topology: Topology, allreduce_key: Callable[[Gpus, int | None], keys.AllReduce]
    ) -> list[keys.Key]:
        """The measurements this needs (``allreduce_key(gpus, size)`` names the all-reduce); none
        when the GPUs ``gpus`` names are not all there (whatever the backend: gloo included)."""
        from . import keys  # the benchmarks' keys, with the judges (the load budget: docs/performance.md)

        if shortfall(topology, self.gpus):
            return []
        if self.metric == "allreduce":
            key = allreduce_key(self.gpus, self.size)
            return [key] if key.ranks >= 1 else []
        if self.metric == "p2p":
            return [keys.Copy("p2p", ln.a, ln.b) for ln in topology.pairs(self.gpus)]
        return [keys.HostCopy("h2d", g, self.pinned) for g in topology.chosen(self.gpus)]

    def judge(
        self, topology: Topology, judgements: list[judgement.Judgement], max_items: int | None = REASON_PAIRS
    ) -> Verdict:
        """``judgements``: each measurement behind this against its threshold, resolved by the one
        threshold rule (``plugin.verdicts.judge_figure``, ``core.judgement``)."""
        # The judges, imported by the bandwidth markers that use them (the load budget: docs/performance.md):
        # a run whose markers are judged on the topology alone never loads them
        from . import judgement
        from .thresholds import gbps_text

        missing = shortfall(topology, self.gpus)
        if missing:
            return unmet(self, [missing], max_items, "measurement")
        if not judgements:
            return unmet(self, [f"nothing to measure: {visible_text(topology)}"], max_items, "measurement")
        failures: list[str]
        sources: list[str]
        failures, sources, broken = [], [], False
        for j in judgements:
            fig, state = j.measured, j.state
            if state == judgement.ABSENT:
                failures.append(Unknown(f"{fig.what}: no figure ({fig.error})"))
            elif state == judgement.BROKEN:  # wrong data: the node is broken, whatever the threshold
                broken = True
                failures.append(f"{fig.what}: {fig.text()}; data wrong: {fig.error}")
            elif state == judgement.UNKNOWN:
                failures.append(
                    Unknown(
                        f"{fig.what}: {fig.text()}, but no expected bandwidth is "
                        f"known for {j.threshold.basis} to judge it against"
                    )
                )
            elif state == judgement.STAGED:
                failures.append(
                    f"{fig.what}: {fig.text()}, slower than the same copy staged through the host "
                    f"({gbps_text(j.staged_gbps)} GB/s): not P2P"  # type: ignore[arg-type]  # STAGED: set
                )
            elif state == judgement.BELOW:
                failures.append(_against(j))
                if fig.source and fig.source not in sources:
                    sources.append(fig.source)
        if not failures:
            return self._met(judgements, max_items)
        verdict = unmet(self, failures, max_items, "measurement")  # a broken figure is known: not unknown
        # A recorded machine's figures: say once where they were published.
        note = f" (recorded figures, not measured here: {'; '.join(sources)})" if sources else ""
        return Verdict(False, verdict.reason + note, verdict.failures, broken, unknown=verdict.unknown)

    def _met(self, judgements: list[judgement.Judgement], max_items: int | None) -> Verdict:
        """Met; each figure behind it recorded for the machine (published, not measured here) named."""
        recorded = [j for j in judgements if j.measured.origin == "recorded"]
        if not recorded:
            return Verdict(True)
        sources = "; ".join(dict.fromkeys(j.measured.source for j in recorded if j.measured.source))
        shown = listed([_against(j) for j in recorded], max_items, "measurement")
        published = f" (published: {sources})" if sources else ""
        return Verdict(True, recorded=f"{self}: met on recorded figures, not measured here: {shown}{published}")


def _against(j: judgement.Judgement) -> str:
    """A figure against its threshold: what, the figure, what it needed and what the link should give."""
    from .thresholds import gbps_text  # with the judges (above)

    fig, th = j.measured, j.threshold
    exp = f", expected {gbps_text(th.expected.gbps)} from {th.basis}" if th.expected is not None else f" ({th.basis})"
    by = f" ({th.set_by})" if th.set_by else ""
    return f"{fig.what}: {fig.text()}, needed {gbps_text(j.needed_gbps)}{by}{exp}"  # type: ignore[arg-type]  # BELOW: set


def _among(gpus: Gpus, index: int) -> bool:
    """Whether GPU ``index`` is one of the GPUs ``gpus`` names (without knowing how many there are)."""
    return gpus is None or (index in gpus if isinstance(gpus, tuple) else index < gpus)


PAIR_KINDS = ("P2P", "SHM")  # judged per GPU pair; the others on NCCL's account of a run


@dataclass(frozen=True)
class TransportRequirement(FactRequirement):
    """``requires_nccl_transport``: NCCL takes ``kind`` (per pair among the GPUs the test uses for P2P
    and SHM; anywhere in NCCL's own account for the network, NVLS and CollNet)."""

    kind: str = "P2P"
    gdrdma: bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.kind, str) or not (self.kind in TRANSPORT_KINDS or self.kind.startswith("NET/")):
            raise RequirementError(
                f"kind must be one of {', '.join(TRANSPORT_KINDS)} or 'NET/<plugin>', got {self.kind!r}"
            )
        if self.gdrdma is not None and not isinstance(self.gdrdma, bool):
            raise RequirementError(f"gdrdma must be True, False or None, got {self.gdrdma!r}")

    def __str__(self) -> str:
        args = [repr(self.kind)] + gpus_kw(self.gpus)
        args += [f"gdrdma={self.gdrdma}"] if self.gdrdma is not None else []
        return f"requires_nccl_transport({', '.join(args)})"

    def judge(
        self,
        topology: Topology,
        pairs: dict[tuple[int, int], tuple[Sequence[str], str]],
        account: dict[str, Any] | None,
        max_pairs: int | None = REASON_PAIRS,
    ) -> Verdict:
        """``pairs``: (a, b) -> (transports, why) as observed or predicted; ``account``: NCCL's own
        log of a run (``{"transports": [...], "gdrdma": bool}``) or None when there is none."""
        if self.kind in PAIR_KINDS and self.gdrdma is None:
            missing = shortfall(topology, self.gpus, need_pair=True)
            if missing:
                return unmet(self, [missing], max_pairs)
            failures: list[str] = []
            for ln in topology.pairs(self.gpus):
                mig = mig_pair(topology, ln)  # NCCL's view of the whole GPUs is not the instances'
                transports, why = pairs.get((ln.a, ln.b), (None, None))
                if mig or transports is None:  # a pair neither seen nor predicted: unknown, never unmet
                    failures.append(
                        Unknown(
                            f"{ln.name} {mig}" if mig else f"{ln.name} ({link_text(ln)}): NCCL's transport is unknown"
                        )
                    )
                elif not any(t.upper().startswith(self.kind) for t in transports):
                    failures.append(f"{ln.name} ({link_text(ln)}) {why}")
            return unmet(self, failures, max_pairs) if failures else Verdict(True)
        if account is None:
            return unmet(
                self,
                [
                    Unknown(
                        "needs NCCL's own account of a run (a small NCCL all-reduce on GPUs), "
                        "which this machine cannot give"
                    )
                ],
                max_pairs,
            )
        seen = set(account.get("transports", ()))
        # As printed (NET/IBext_v8) and by family (NET/IB): an external plugin meets its family's kind.
        names = seen | set(account.get("families", ()))
        failures = (
            []
            if any(t == self.kind or t.startswith(self.kind + "/") for t in names)
            else [f"NCCL used {', '.join(sorted(seen)) or 'no transport'}, not {self.kind}"]
        )
        if self.gdrdma is not None and bool(account.get("gdrdma")) != self.gdrdma:
            failures.append(f"GPUDirect RDMA {'off' if self.gdrdma else 'on'}")
        return unmet(self, failures, max_pairs) if failures else Verdict(True)


@dataclass(frozen=True)
class NoFallbackRequirement(FactRequirement):
    """Run gate ``no-fallback``: no GPU pair that deserves P2P falls back to SHM or the network."""

    def __str__(self) -> str:
        return "no-fallback" + (f"@{gpus_text(self.gpus)}" if self.gpus else "")

    def judge(self, fallbacks: list[Any], max_pairs: int | None = REASON_PAIRS) -> Verdict:
        failures = [
            f"{f.name} {f.label} uses {f.actual} instead of {f.expected} ({'; '.join(f.causes)})"
            for f in fallbacks
            if _among(self.gpus, f.a) and _among(self.gpus, f.b)
        ]
        return unmet(self, failures, max_pairs) if failures else Verdict(True)
