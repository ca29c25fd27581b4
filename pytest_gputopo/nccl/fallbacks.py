"""What NCCL did against what it should (``nccl.expect``): a run's view of each GPU pair (``NcclView``:
NCCL's own log where its run connected the pair, else the prediction), and each pair that deserved P2P
but fell back to SHM or the network (``Fallback``), named with every cause that can be seen.

Pure: the standard library, the core and NCCL's rules only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.model import Topology
from .expect import FAIL, NET, NVLINK_PATHS, P2P, PATH_ORDER, SHM, UNKNOWN, Expectation
from .nccl_settings import NcclSettings

__all__ = ["Fallback", "find_fallbacks", "fallback_summary", "NcclView"]


@dataclass(frozen=True)
class Fallback:
    """A pair that deserved P2P but NCCL used ``actual`` (``"SHM"``, ``"NET/IB"``, ``"SHM+NET/IB"``).
    ``causes``: every cause we can see, most direct first; never empty (``"no visible cause ..."``).
    ``strong``: the pair has NVLink (falling back costs an order of magnitude)."""

    a: int
    b: int
    expected: str
    actual: str
    causes: tuple[str, ...]
    label: str = "?"
    strong: bool = False

    @property
    def name(self) -> str:
        return f"GPU{self.a}-GPU{self.b}"


def _family(transport: str) -> str:
    """Transport names as the log parser gives them (``P2P``, ``SHM``, ``NET/IB``), variants folded:
    ``P2P/CUMEM/read`` -> ``P2P``, ``SHM/direct/direct`` and ``direct shared memory`` -> ``SHM``,
    ``NET/IB/0/GDRDMA`` -> ``NET/IB``."""
    t = transport.strip()
    if t.upper().startswith("P2P"):
        return P2P
    if t.upper().startswith("SHM") or "shared memory" in t.lower():
        return SHM
    if t.upper().startswith("NET"):
        parts = t.split("/")
        return "/".join(parts[:2]) if len(parts) > 1 and parts[1] else NET
    return t


def _rank(t: str) -> tuple:
    return ({P2P: 0, SHM: 1}.get(t, 2 if t.startswith(NET) else 3), t)


def find_fallbacks(
    expectations: Sequence[Expectation],
    observed: Mapping[tuple[int, int], set],
    settings: NcclSettings | None = None,
    measured_p2p: Mapping[tuple[int, int], tuple[float, float]] | None = None,
) -> list[Fallback]:
    """The pairs that deserved P2P (by their link under NCCL's defaults, or by the settings given)
    but where NCCL's log shows only SHM or the network. ``observed``: per pair of CUDA indices, the
    transports NCCL used (pairs NCCL did not connect directly are absent and judged by nobody).
    ``measured_p2p``: per pair, (measured GB/s, expected GB/s) of a P2P copy; a ratio under 0.5 is
    named as a cause. A pair seen with P2P is fine whatever else it used; a pair that deserved SHM
    and used the network is not reported (NCCL may judge the NICs faster, on purpose)."""
    settings = settings or NcclSettings()
    measured_p2p = measured_p2p or {}
    out = []
    for e in expectations:
        seen = observed.get((e.a, e.b)) or observed.get((e.b, e.a))
        if not seen or e.transport == UNKNOWN:
            continue
        if P2P not in (e.baseline, e.transport) and e.transport != FAIL:
            continue
        families = {_family(t) for t in seen}
        if P2P in families:
            continue
        actual = "+".join(sorted(families, key=_rank))
        causes = []
        if settings.p2p_disable:
            causes.append(settings.describe("NCCL_P2P_DISABLE"))
        elif settings.p2p_level is not None and e.path and PATH_ORDER[e.path] > PATH_ORDER[settings.p2p_level]:
            causes.append(f"{settings.level_origin()}, below this pair's {e.path}")
        causes.extend(e.p2p_refusals)
        if (
            settings.ignore_disabled_p2p == 1
            and e.path in NVLINK_PATHS
            and any(r.startswith("NVML") for r in e.p2p_refusals)
        ):
            causes.append(f"{settings.describe('NCCL_IGNORE_DISABLED_P2P')} (silences NCCL's WARN)")
        if not causes:
            causes.append("no visible cause: the NCCL settings, NVML and CUDA allow P2P here")
        nets = [t for t in families if t.startswith(NET)]
        if nets and SHM not in families:
            if settings.shm_disable:
                causes.append(settings.describe("NCCL_SHM_DISABLE"))
            elif causes[0].startswith("no visible cause"):
                causes.append("NCCL may judge the network faster than this path (NCCL_NET_DISABLE_INTRA=1 stops that)")
        if "NET/Socket" in families and settings.ib_disable:
            causes.append(settings.describe("NCCL_IB_DISABLE"))
        if nets and settings.net is not None:
            causes.append(settings.describe("NCCL_NET"))
        m = measured_p2p.get((e.a, e.b)) or measured_p2p.get((e.b, e.a))
        if m and m[1] and m[1] > 0 and m[0] / m[1] < 0.5:
            causes.append(f"measured P2P {m[0]:.1f} GB/s, {m[0] / m[1]:.0%} of the {m[1]:.0f} GB/s expected")
        out.append(
            Fallback(
                a=e.a,
                b=e.b,
                expected=P2P,
                actual=actual,
                causes=tuple(causes),
                label=e.label,
                strong=e.path in NVLINK_PATHS,
            )
        )
    return out


def fallback_summary(fallbacks: Sequence[Fallback]) -> str:
    """One header-friendly line naming the worst fallback (an NVLink pair first) and its causes,
    with a count of the others: ``"fallback: GPU0-GPU1 NV12 uses SHM instead of P2P
    (NCCL_P2P_DISABLE=1 from environment)"``; ``""`` when there is none."""
    if not fallbacks:
        return ""
    first = next((f for f in fallbacks if f.strong), fallbacks[0])
    line = (
        f"fallback: {first.name} {first.label} uses {first.actual} instead of {first.expected} "
        f"({'; '.join(first.causes)})"
    )
    others = len(fallbacks) - 1
    if others:
        line += f"; {others} more pair{'s' if others > 1 else ''}"
    return line


class NcclView:
    """NCCL's transport for each GPU pair, and its fallbacks: by its own log where its run connected
    the pair, else predicted (``pairs`` says which)."""

    def __init__(
        self,
        topology: Topology,
        settings,
        expectations: list,
        account: dict | None,
        origin: str,
        observed: bool = False,
    ):
        self.topology, self.settings, self.expectations = topology, settings, expectations
        self.account = account  # NCCL's log of a run, when one could be had
        self.origin = origin  # in words, for reasons
        self.observed = observed  # NCCL's own account was asked for (had or not): never ask twice

    def pairs(self) -> dict:
        """(a, b) -> (transports, why): NCCL's own for the pairs its run connected; the prediction,
        said to be one, for the others (a ring or tree connects neighbours only, and NCCL >= 2.22
        connects lazily per algorithm: an unconnected pair is not a pair without a transport)."""
        connected = (self.account or {}).get("pairs") or {}
        out = {}
        for e in self.expectations:
            used = connected.get(f"{e.a}-{e.b}")
            if used:
                out[(e.a, e.b)] = (set(used), f"used {', '.join(used)} (NCCL's log)")
            elif connected:
                out[(e.a, e.b)] = (
                    {e.transport},
                    f"would use {e.transport}: {e.reason} (predicted: NCCL's run did not connect this pair)",
                )
            else:
                out[(e.a, e.b)] = ({e.transport}, f"would use {e.transport}: {e.reason}")
        return out

    def fallbacks(self, measured_p2p: dict | None = None) -> list:
        observed = {pair: transports for pair, (transports, _) in self.pairs().items()}
        return find_fallbacks(self.expectations, observed, self.settings, measured_p2p)

    def account_line(self) -> str | None:
        """For the summary: what NCCL itself used (across nodes under torchrun), when it ran."""
        if self.account is None:
            return None
        gdr = "on" if self.account["gdrdma"] else "off"
        used = ", ".join(self.account["transports"]) or "no transport"
        return f"gputopo NCCL used {used} (GPUDirect RDMA {gdr}) [NCCL's own log]"
