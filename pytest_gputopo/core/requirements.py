"""Requirements a test or a whole run places on the machine, and their verdicts: what every
requirement is (``Requirement``, ``Verdict``, ``Outcome``, the GPUs it names) and the ones judged on
the topology alone (P2P, NVLink, a link class). Those on one GPU's facts are ``core.gpu_requirements``,
those on facts a run gathers (figures, NCCL's account) ``core.fact_requirements``, and a test run as
n ranks ``core.ranks_requirement``.

Pure: marker arguments and ``--gputopo-require`` expressions become frozen, hashable requirement
objects, each validating its own arguments (``RequirementError`` naming the marker argument), so that
a requirement built directly is as checked as one built from a marker; ``evaluate(requirement,
topology)`` returns a ``Verdict`` whose reason names the GPU or the pair, what was found and what is
needed. "The GPUs a test uses" (``gpus``) are ``cuda:0 .. cuda:gpus-1`` for a number, the listed ones
for a list (``[0, 5]``), all visible GPUs for None; fewer GPUs than named is itself unmet, and an
unknown fact is never met.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .causes import Finding, Unknown
from .limits import MAX_GPUS, MAX_NVLINKS, show_value
from .model import CUDA, NVML, Link, LinkClass, LinkLabel, Topology, link_satisfies
from .units import counted

# How many failing pairs a test's skip reason names before "and N more" (a run gate lists all).
REASON_PAIRS = 3


Gpus = int | tuple[int, ...] | None  # a requirement's ``gpus``: a number, listed indices, or every GPU


class RequirementError(ValueError):
    """A marker argument or a ``--gputopo-require`` term is malformed."""


def int_arg(value: object, what: str, low: int, high: int) -> int:
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
            int_arg(index, f"each GPU index in {what}", 0, MAX_GPUS - 1)
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


def gpus_kw(gpus: Gpus) -> list[str]:
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
        return "requires_p2p" + (f"({gpus_kw(self.gpus)[0]})" if self.gpus else "")

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
        int_arg(self.min_links, "min_links", 1, MAX_NVLINKS)

    def __str__(self) -> str:
        args = gpus_kw(self.gpus)
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
        gpus = "".join(f", {kw}" for kw in gpus_kw(self.gpus))
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
