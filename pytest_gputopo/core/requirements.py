"""Requirements a test or a whole run places on the machine, and their verdicts.

Pure: marker arguments and ``--gputopo-require`` expressions become frozen, hashable requirement
objects, each validating its own arguments (``RequirementError`` naming the marker argument), so that
a requirement built directly is as checked as one built from a marker; ``evaluate(requirement,
topology)`` returns a ``Verdict`` whose reason names the GPU or the pair, what was found and what is
needed. "The GPUs a test uses" (``gpus``) are ``cuda:0 .. cuda:gpus-1`` for a number, the listed ones
for a list (``[0, 5]``), all visible GPUs for None; fewer GPUs than named is itself unmet, and an
unknown fact is never met.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .causes import Finding, Unknown
from .limits import MAX_BYTES, MAX_GBPS, MAX_GPUS, MAX_NVLINKS, is_bandwidth, show_value
from .model import ALL_FACTS, CUDA, NVML, Link, LinkClass, LinkLabel, Topology, link_satisfies
from .units import counted

if TYPE_CHECKING:
    from . import judgement, keys

# How many failing pairs a test's skip reason names before "and N more" (a run gate lists all).
REASON_PAIRS = 3
TRANSPORT_KINDS = ("P2P", "SHM", "NET", "NET/IB", "NET/Socket", "NVLS", "COLLNET")
METRICS = ("allreduce", "p2p", "h2d")


Gpus = int | tuple[int, ...] | None  # a requirement's ``gpus``: a number, listed indices, or every GPU


class RequirementError(ValueError):
    """A marker argument or a ``--gputopo-require`` term is malformed."""


def _int_arg(value: object, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequirementError(f"{what} must be an integer from {low} to {high}, got {show_value(value)}")
    return value


def gpus_arg(value: object, low: int = 1, what: str = "gpus") -> Gpus:
    """``gpus`` as a requirement holds it: None, a number, or a sorted tuple of GPU indices."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        if not value:
            raise RequirementError(f"{what} must list at least one GPU index, got []")
        for index in value:
            _int_arg(index, f"each GPU index in {what}", 0, MAX_GPUS - 1)
        twice = sorted({i for i in value if value.count(i) > 1})
        if twice:
            raise RequirementError(f"{what} lists GPU{twice[0]} twice")
        return tuple(sorted(value))
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_GPUS:
        raise RequirementError(
            f"{what} must be a number of GPUs from {low} to {MAX_GPUS} or a list of GPU "
            f"indices such as [0, 5], got {show_value(value)}"
        )
    return value


def gpus_text(gpus: Gpus) -> str:
    """``gpus`` as the user wrote it: ``4`` or ``[0, 5]``."""
    return str(list(gpus)) if isinstance(gpus, tuple) else str(gpus)


def _gpus_kw(gpus: Gpus) -> list[str]:
    return [] if gpus is None else [f"gpus={gpus_text(gpus)}"]


def shortfall(topology: Topology, gpus: Gpus, need_pair: bool = False) -> str | None:
    """Why the GPUs named are not all there (None when they are): fewer visible than the number, a
    listed index this machine does not have, or (``need_pair``, all GPUs) fewer than two."""
    if isinstance(gpus, tuple):
        missing = [i for i in gpus if i >= len(topology.gpus)]
        return f"needs {', '.join(f'GPU{i}' for i in missing)}, {visible_text(topology)}" if missing else None
    need = gpus if gpus is not None else (2 if need_pair else 0)
    if len(topology.gpus) >= need:
        return None
    return f"needs {counted(gpus, 'GPU') if gpus is not None else '2 GPUs to form a pair'}, {visible_text(topology)}"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""
    failures: tuple[str, ...] = ()  # one entry per unmet pair (or the count shortfall)
    broken: bool = False  # a benchmark returned wrong data: a broken node, a failure even when not strict
    unknown: bool = False  # unmet only for facts no source reported (``causes.Unknown``): not a shortfall
    # A met verdict that rests on figures recorded for the machine, not measured here: what and
    # where they were published, which every output of a passed test must say ("" otherwise).
    recorded: str = ""


@dataclass(frozen=True)
class Outcome:
    """A requirement's verdict for the run, the same on every rank (``plugin.verdicts.evaluate``, kept
    in the run's state): ``reason`` None when met; ``broken`` when a benchmark returned wrong data (a
    broken node: a failure even when not strict); ``recorded``, of a met one, the figures recorded for
    the machine (not measured here) it rests on, in words ("" when none); ``unknown``, of an unmet one,
    that it is unmet only for facts no source reported (``Verdict.unknown``): never met, and never said
    to fall short."""

    reason: str | None
    broken: bool = False
    recorded: str = ""
    causes: tuple[str, ...] = ()  # of an unmet one judged on the topology: a GPU or the machine (``core.causes``)
    unknown: bool = False

    @property
    def word(self) -> str:
        """The verdict in one word, as the JSON report's ``verdicts`` and a plan write it: met, broken,
        unknown (unmet only for facts no source reported, or figures nothing says what they should
        reach) or unmet (known to fall short)."""
        if self.reason is None:
            return "met"
        return "broken" if self.broken else "unknown" if self.unknown else "unmet"


@dataclass(frozen=True)
class Requirement:
    """Base: ``gpus`` names the GPUs the test uses (a number, a list of indices, or None: all visible)."""

    gpus: int | tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", gpus_arg(self.gpus))

    @property
    def facts(self) -> frozenset[str]:
        """What must be learned about the host to judge it (``model.NVML``, ``CUDA``, ``TORCH``):
        the probe asks nothing more, so that a run pays only for the questions its tests ask."""
        return frozenset((NVML,))

    def __str__(self) -> str:
        raise NotImplementedError

    def check_pair(self, link: Link) -> str | None:
        """None when ``link`` meets the requirement, else what is wrong with it."""
        raise NotImplementedError

    def evaluate(self, topology: Topology, max_pairs: int | None = REASON_PAIRS) -> Verdict:
        found = self.findings(topology)
        return unmet(self, found, max_pairs) if found else Verdict(True)

    def findings(self, topology: Topology) -> list[Finding]:
        """Each unmet pair, naming its two GPUs (``core.causes``: a GPU in every failing pair is
        their cause), or the GPUs missing."""
        missing = shortfall(topology, self.gpus, need_pair=True)
        if missing:
            return [Finding(missing)]
        return [
            Finding(f"{ln.name} {problem}", (f"GPU{ln.a}", f"GPU{ln.b}"), problem, ln.name)
            for ln in topology.pairs(self.gpus)
            if (problem := mig_pair(topology, ln) or self.check_pair(ln) or self.fabric_pair(topology, ln)) is not None
        ]

    # What NVML's answers alone cannot tell while a GPU's NVLink fabric is down (overridden below).
    over_fabric = ""

    def fabric_pair(self, topology: Topology, link: Link) -> str | None:
        """Where the pair meets this requirement by NVML's answers but either GPU's NVLink fabric is
        not up (NVML's GPU fabric state: the fabric manager has not registered it): unknown, never met.
        NVML lists the NVLinks and reports P2P OK on such a node (an NVSwitch or GB200 node whose fabric
        manager is down), and no peer traffic crosses them."""
        if not self.over_fabric:
            return None
        down = [
            f"GPU{g.index}: {g.fabric.problem}"
            for g in (topology.gpus[link.a], topology.gpus[link.b])
            if g.fabric is not None and g.fabric.up is False
        ]
        if not down:
            return None
        return Unknown(f"{self.over_fabric} unknown: {'; '.join(down)}")


MIG_INSTANCE = "a process sees a MIG instance, never the whole GPU"


def mig_enabled(topology: Topology, gpus: Iterable[int]) -> str | None:
    """Which of ``gpus`` (indices) have MIG enabled, as a reason's subject ("GPU0 has MIG enabled"), or
    None. The whole GPU's facts (memory, NVLinks, P2P, figures) are then no fact of what a process
    sees: CUDA cannot use a MIG-enabled GPU as a whole, and NVIDIA's MIG guide supports no P2P
    between GPUs (PCIe or NVLink) under MIG."""
    on = [i for i in gpus if topology.gpus[i].mig]
    if not on:
        return None
    return f"{' and '.join(f'GPU{i}' for i in on)} {'has' if len(on) == 1 else 'have'} MIG enabled"


def mig_pair(topology: Topology, link: Link) -> str | None:
    """A pair's link and P2P are unknown to a process when either GPU has MIG enabled."""
    on = mig_enabled(topology, (link.a, link.b))
    return Unknown(f"link and P2P are unknown: {on} ({MIG_INSTANCE})") if on else None


def visible_text(topology: Topology) -> str:
    n = len(topology.gpus)
    return f"{n} visible ({topology.problem})" if topology.problem and not n else f"{n} visible"


def unmet(req: Requirement, failures: Sequence[str | Finding], max_pairs: int | None, noun: str = "pair") -> Verdict:
    """Unmet for ``failures`` (problems, or ``Finding``s), unknown when every one is a fact no source
    reported (``Unknown``, ``Finding.unknown``)."""
    unknown = bool(failures) and all(f.unknown if isinstance(f, Finding) else isinstance(f, Unknown) for f in failures)
    lines = [f.line if isinstance(f, Finding) else f for f in failures]
    return Verdict(False, f"{req}: {listed(lines, max_pairs, noun)}", tuple(lines), unknown=unknown)


def listed(items: list[str], most: int | None, noun: str) -> str:
    """``a; b; c; and 2 more pairs``: the first ``most`` items (None: all), then how many are left out."""
    shown = items if most is None else items[:most]
    more = len(items) - len(shown)
    return "; ".join(shown) + (f"; and {counted(more, 'more ' + noun)}" if more else "")


def link_text(link: Link) -> str:
    return "an unknown link" if link.label is None else str(link.label)


def p2p_unknown(link: Link) -> str:
    """Why a pair's P2P is unknown, naming the capability no source reported and how to record it:
    nvidia-smi text gives one capability per ``topo -p2p`` run (a profile recorded with ``--p2p r:``
    only has no write status)."""
    missing = [cap for cap in ("read", "write") if getattr(link.p2p, cap).value == "U"]
    if len(missing) == 1:
        (cap,), other = missing, "write" if missing == ["read"] else "read"
        return Unknown(
            f"P2P {cap} status is unknown ({other} {getattr(link.p2p, other).description}; no source "
            f"reported {cap}: record `nvidia-smi topo -p2p {cap[0]}` with `gputopo record --from-smi TOPO "
            f"--p2p {cap[0]}:FILE`)"
        )
    return Unknown(
        "P2P status is unknown (no source reported read or write: record `nvidia-smi topo -p2p r` and "
        "`-p2p w` with `gputopo record --from-smi TOPO --p2p r:FILE --p2p w:FILE`)"
    )


@dataclass(frozen=True)
class P2PRequirement(Requirement):
    facts = frozenset((NVML, CUDA))  # NVML's P2P status joined with CUDA's own peer-access answer
    over_fabric = "P2P"

    def __str__(self) -> str:
        return "requires_p2p" + (f"({_gpus_kw(self.gpus)[0]})" if self.gpus else "")

    def findings(self, topology: Topology) -> list[Finding]:
        """As every pair requirement's, but where CUDA cannot start here (its view was asked and not
        had) no pair is met: P2P is something a CUDA process does, and NVML's yes is no answer then."""
        found = super().findings(topology)
        if topology.cuda_problem is None or (found and not found[0].gpus):  # CUDA fine, or GPUs missing
            return found
        unmet = {f.name for f in found}
        why = Unknown(f"P2P unknown: CUDA cannot start here ({topology.cuda_problem})")
        return found + [
            Finding(f"{ln.name} {why}", (f"GPU{ln.a}", f"GPU{ln.b}"), why, ln.name)
            for ln in topology.pairs(self.gpus)
            if ln.name not in unmet
        ]

    def check_pair(self, link: Link) -> str | None:
        works = link.p2p_works
        if works:
            return None
        if works is None:
            return p2p_unknown(link)
        refused = [
            f"{cap} {getattr(link.p2p, cap).description}"
            for cap in ("read", "write")
            if getattr(link.p2p, cap).value not in ("OK", "U")
        ]
        if link.cuda_peer is False and not refused:
            return "cannot do P2P (CUDA reports no peer access)"
        return "cannot do P2P (" + ", ".join(refused) + ")"


@dataclass(frozen=True)
class NvLinkRequirement(Requirement):
    min_links: int = 1
    over_fabric = "NVLink"

    def __post_init__(self) -> None:
        super().__post_init__()
        _int_arg(self.min_links, "min_links", 1, MAX_NVLINKS)

    def __str__(self) -> str:
        args = _gpus_kw(self.gpus)
        args += [f"min_links={self.min_links}"] if self.min_links != 1 else []
        return "requires_nvlink" + (f"({', '.join(args)})" if args else "")

    def check_pair(self, link: Link) -> str | None:
        if link.nvlinks is None:
            return Unknown("has an unknown number of NVLinks")
        if link.nvlinks >= self.min_links:
            return None
        if link.nvlinks:
            return f"are linked by {link_text(link)}, needs NV{self.min_links}"
        return f"are linked by {link_text(link)}, not NVLink"


@dataclass(frozen=True)
class LinkRequirement(Requirement):
    """``need`` is a ``LinkLabel`` or its text as the user wrote it (``"NV"`` means any NVLink)."""

    need: LinkLabel | str = LinkLabel(LinkClass.SYS)
    spelled: str = ""  # as the user wrote it

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.need, LinkLabel):
            return
        if not isinstance(self.need, str):
            raise RequirementError(f"cls must be a link class string such as 'NV', 'NV12' or 'PXB', got {self.need!r}")
        try:
            label = LinkLabel.parse(self.need)
        except ValueError as exc:
            raise RequirementError(str(exc)) from None
        object.__setattr__(self, "spelled", self.need.strip().upper())
        object.__setattr__(self, "need", label)

    def __str__(self) -> str:
        gpus = "".join(f", {kw}" for kw in _gpus_kw(self.gpus))
        return f"requires_link('{self.spelled or self.need}'{gpus})"

    @property
    def over_fabric(self) -> str:  # type: ignore[override]  # the base's class attribute, read from ``need``
        # a PCIe class is met by the PCIe path, fabric or not
        return "NVLink" if self.need.cls is LinkClass.NV else ""  # type: ignore[union-attr]  # a LinkLabel by now

    def check_pair(self, link: Link) -> str | None:
        if link.label is None:
            return Unknown("are linked by an unknown link")
        if link_satisfies(link.label, self.need):  # type: ignore[arg-type]  # parsed in __post_init__
            return None
        return f"are linked by {link.label}"


# ---------------------------------------------------------------------------------------------
# Bandwidth: judged on measured (or, for a recorded machine, published) figures


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
            _int_arg(self.size, "size (bytes)", 4, MAX_BYTES)
        if not isinstance(self.pinned, bool):
            raise RequirementError(f"pinned must be True or False, got {self.pinned!r}")
        for name in ("gbps", "floor"):  # 50 and 50.0 are one requirement
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))

    def __str__(self) -> str:
        args = [] if self.gbps is None else [f"{self.gbps:g}"]
        args += _gpus_kw(self.gpus)
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
        args = [repr(self.kind)] + _gpus_kw(self.gpus)
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


# ---------------------------------------------------------------------------------------------
# A test run as n ranks (``@pytest.mark.ranks``): where its ranks go, and what that needs

MAX_RANKS = 1024  # ranks of one test on one host (MAX_GPUS: one GPU each)
MAX_RANKS_TIMEOUT_S = 24 * 3600
# torch's MultiProcessTestCase gives a test 300 s (TIMEOUT_DEFAULT, torch/testing/_internal/common_distributed.py)
RANKS_TIMEOUT_S = 300.0
# A rank's memory before its body allocates anything: python with torch resident (about 150 MiB measured
# on torch 2.x CPU: a gloo rank's VmRSS), with room. The gloo sweep adds its buffers (bench.sweep).
RANK_BASE_BYTES = 256 * 2**20
GROUP_MARGIN_S = (5.0, 30.0)  # the least and most of a test's time left after its group's timeout: 5 s, the 3 s the
# other ranks are given after one failed (rank_procs.FAILED_GRACE_S) and 2 s for their stacks


@dataclass(frozen=True)
class RanksRequirement(Requirement):
    """``ranks(n, timeout=, backend=)``: the test runs as ``n`` ranks, each on one GPU where it runs
    on GPUs (``backend="nccl"``, or no backend named on a machine with a GPU), else on the CPUs. On
    GPUs it needs ``n`` of them (a MIG-enabled one is unknown: a process sees an instance); on the
    CPUs nothing."""

    n: int = 1  # given a list of world sizes: the first, until each test is given its own (``of_size``)
    timeout: float | None = None  # seconds for the whole test; None: RANKS_TIMEOUT_S
    backend: str | None = None  # the process group's backend; None: NCCL on GPUs, gloo on CPUs
    sizes: tuple[int, ...] | None = None  # ``ranks([2, 4])``: one test per world size
    pool: bool | None = None  # a warm pool of ranks kept between tests; None: the ini's gputopo_ranks_pool

    def __post_init__(self) -> None:
        sizes = self.n
        if isinstance(sizes, (list, tuple)):
            if not sizes:
                raise RequirementError("n (ranks) must list at least one world size, got []")
            for size in sizes:
                _int_arg(size, "each world size in n (ranks)", 1, MAX_RANKS)
            if len(set(sizes)) < len(sizes):
                raise RequirementError(f"n (ranks) lists a world size twice: {show_value(list(sizes))}")
            object.__setattr__(self, "sizes", tuple(sizes))
            object.__setattr__(self, "n", sizes[0])
        else:
            _int_arg(self.n, "n (ranks)", 1, MAX_RANKS)
        if self.timeout is not None:
            if (
                isinstance(self.timeout, bool)
                or not isinstance(self.timeout, (int, float))
                or not 0 < self.timeout <= MAX_RANKS_TIMEOUT_S
            ):
                raise RequirementError(
                    f"timeout must be a number of seconds above 0 and at most "
                    f"{MAX_RANKS_TIMEOUT_S}, got {show_value(self.timeout)}"
                )
            object.__setattr__(self, "timeout", float(self.timeout))  # 5 and 5.0 are one requirement
        if self.pool is not None and not isinstance(self.pool, bool):
            raise RequirementError(f"pool must be True, False or None, got {show_value(self.pool)}")
        if self.backend is not None and (
            not isinstance(self.backend, str)
            or not self.backend
            or not all(c.isascii() and (c.isalnum() or c in "_:,") for c in self.backend)
        ):
            raise RequirementError(
                f"backend must be a torch.distributed backend name such as 'nccl' or 'gloo' "
                f"(or None: NCCL on GPUs, gloo on CPUs), got {show_value(self.backend)}"
            )

    def __str__(self) -> str:
        n = str(list(self.sizes)) if self.sizes else str(self.n)
        args = [n] + ([f"timeout={self.timeout:g}"] if self.timeout is not None else [])
        args += [f"backend={self.backend!r}"] if self.backend is not None else []
        args += [f"pool={self.pool}"] if self.pool is not None else []
        return f"ranks({', '.join(args)})"

    def of_size(self, size: int) -> RanksRequirement:
        """The requirement of the test that runs at world size ``size`` of ``sizes`` (``ranks(2)``), one
        test per size as DeepSpeed's ``world_size = [1, 2, 4]``."""
        return replace(self, n=size, sizes=None)

    @property
    def timeout_s(self) -> float:
        return RANKS_TIMEOUT_S if self.timeout is None else self.timeout

    @property
    def group_timeout_s(self) -> float:
        """The process group's timeout: a collective that waits this long raises on its rank (gloo) or
        is aborted by NCCL's watchdog, which names it, before the test's own deadline ends the ranks
        with stacks only. A tenth of the test's time is left (5 s to 30 s, never above half of it):
        for the rank to report, and for the others' stacks."""
        margin = min(max(self.timeout_s / 10, GROUP_MARGIN_S[0]), GROUP_MARGIN_S[1], self.timeout_s / 2)
        return self.timeout_s - margin

    def on_gpus(self, topology: Topology) -> bool:
        """Whether the ranks run on GPUs: NCCL needs them, gloo is given the CPUs, and any other
        backend (or none named) takes GPUs where the machine has one."""
        if self.backend is not None and self.backend.lower() in ("nccl", "gloo"):
            return self.backend.lower() == "nccl"
        return bool(topology.gpus)

    def backend_on(self, topology: Topology) -> str:
        return self.backend or ("nccl" if self.on_gpus(topology) else "gloo")

    def memory_shortfall(self, available: int | None) -> str | None:
        """Why ``available`` bytes of this host cannot hold the ranks' processes (``RANK_BASE_BYTES``
        each, before the body allocates), None when they fit or the memory is unknown."""
        need = self.n * RANK_BASE_BYTES
        if available is None or need <= available:
            return None
        return (
            f"{self.n} ranks need about {need / 2**30:.1f} GiB of this host's memory before their body "
            f"allocates anything ({RANK_BASE_BYTES // 2**20} MiB each: python and torch), and "
            f"{available / 2**30:.1f} GiB is available"
        )

    def findings(self, topology: Topology) -> list[Finding]:
        if not topology.gpus_known and (self.backend or "").lower() not in ("nccl", "gloo"):
            # Never gloo on the CPUs for a host whose GPUs NVML could not list: the test would pass
            # on a GPU node that cannot run it.
            return [
                Finding(
                    Unknown(
                        f"whether this host has GPUs for the ranks is unknown ({topology.problem}); "
                        f"backend='gloo' runs them on the CPUs"
                    )
                )
            ]
        if not self.on_gpus(topology):
            return []
        missing = shortfall(topology, self.n)
        if missing:
            return [Finding(f"one GPU per rank, {missing}")]
        mig = mig_enabled(topology, range(self.n))
        return [Finding(Unknown(f"{mig} ({MIG_INSTANCE})"))] if mig else []
