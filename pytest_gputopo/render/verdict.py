"""A run's verdict as its report document carries it (``"verdict"``, decided once by the run's record:
``core.run_verdict``), and the words every medium draws the document's figures with. Nothing here
decides a verdict: a document without one (written before documents carried it) has none to draw.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..core import keys

FAILED = "FAILED"
_FAILURES = ("failed", "error")


def verdict(doc: dict) -> dict[str, Any] | None:
    """The run's verdict the document carries: word, complete, counts, causes (outcome, what, where,
    found, kind, name, evidence), not_judged (checks, kinds, reason); None where it carries none."""
    found = doc.get("verdict")
    return found if isinstance(found, dict) else None


def failed_causes(v: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in v.get("causes") or [] if c.get("outcome") in _FAILURES]


_KIND_WORDS = {
    "p2p": "P2P cop{}",
    "p2p_bidir": "P2P cop{} both ways at once",
    "p2p_staged": "cop{} staged through the host",
    "h2d": "host -> device cop{}",
    "d2h": "device -> host cop{}",
    "allreduce": "all-reduce{}",
}


def _kind(kind: str, n: int) -> str:
    words = _KIND_WORDS.get(kind)
    if words is None:
        return f"{n} {kind}"
    return f"{n} " + words.format(("y" if n == 1 else "ies") if "cop{}" in words else ("" if n == 1 else "s"))


_FLOORLESS = frozenset(kind for kind in keys.COPY_KINDS if keys.Copy(kind, 0, 1).floor is None)


def floorless(m: dict) -> str | None:
    """What a measurement of a kind with no floor of its own is held to (``core.keys``: the staged
    twin, the host path a P2P copy must beat): never judged, so shown as such; None for the others."""
    kind = (m.get("key") or [None])[0]
    return keys.JUDGED_AGAINST[kind] if kind in _FLOORLESS else None


def no_figures(doc: dict) -> list[tuple[str, str]]:
    """The measurements without a figure, by their reason, each reason once with what it left without
    a figure: [("28 P2P copies, 8 device -> host copies", "none published for ...")]."""
    reasons: dict[str, Counter] = {}
    for m in doc.get("measurements") or []:
        if m.get("gbps") is None and isinstance(m.get("key"), list) and m["key"]:
            reasons.setdefault(str(m.get("error") or "no reason given"), Counter())[m["key"][0]] += 1
    return [(", ".join(_kind(kind, n) for kind, n in kinds.items()), reason) for reason, kinds in reasons.items()]
