"""Run-level requirement expressions: ``--gputopo-require "gpus>=8,p2p,link>=NV18"`` -> requirements."""

from __future__ import annotations

import re

from . import numtext
from .limits import MAX_GPUS, MAX_NVLINKS, show_value
from .requirements import (GpuCount, LinkRequirement, NoFallbackRequirement, NvLinkRequirement, P2PRequirement,
                           Requirement, RequirementError)


REQUIRE_GRAMMAR = """\
  EXPR  := TERM ("," TERM)*
  TERM  := "gpus>=" N
         | "p2p" [@N]                  every pair can do P2P read and write
         | "nvlink" [">=" LINKS] [@N]  every pair has at least LINKS NVLinks (default 1)
         | "link>=" CLASS [@N]         every pair is linked at CLASS or better
         | "no-fallback" [@N]          no pair that deserves P2P falls back to SHM or the network
  CLASS := NV | NV<links> | PIX | PXB | PHB | NODE | SYS   (order: NV# > PIX > PXB > PHB > NODE > SYS)
  @N    := among the first N GPUs only (default: all visible GPUs)
  N, LINKS := ASCII digits; gpus>= 0..1024, @N 1..1024, LINKS 1..36
  example: gpus>=8,p2p,link>=NV18"""

_TERM_RE = re.compile(  # [0-9], not \d: "١٢" is no number here
    r"^(?:(?P<gpus>gpus\s*>=\s*(?P<count>[0-9]+))"
    r"|(?P<p2p>p2p)"
    r"|(?P<nvlink>nvlink)(?:\s*>=\s*(?P<links>[0-9]+))?"
    r"|link\s*>=\s*(?P<cls>[A-Za-z0-9]+)"
    r"|(?P<nofallback>no-fallback))"
    r"(?:\s*@\s*(?P<at>[0-9]+))?$", re.IGNORECASE)


def _number(text: str, what: str, low: int, high: int) -> int:
    value = numtext.read_int(text, low, high)
    if value is None:
        raise RequirementError(f"{what} must be an integer from {low} to {high}, got {text[:20]}"
                               + ("..." if len(text) > 20 else ""))
    return value


def parse_expression(text: str) -> tuple[Requirement, ...]:
    terms = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in terms):
        raise RequirementError(f"empty term in {text!r}\n{REQUIRE_GRAMMAR}")
    out = []
    for term in terms:
        m = _TERM_RE.match(term)
        if not m:
            raise RequirementError(f"cannot read term {show_value(term)}\n{REQUIRE_GRAMMAR}")
        try:
            at = _number(m["at"], "@N", 1, MAX_GPUS) if m["at"] else None
            if m["gpus"]:
                if at is not None:
                    raise RequirementError("'@N' does not apply to gpus>=")
                out.append(GpuCount(count=_number(m["count"], "gpus>=", 0, MAX_GPUS)))
            elif m["p2p"]:
                out.append(P2PRequirement(gpus=at))
            elif m["nofallback"]:
                out.append(NoFallbackRequirement(gpus=at))
            elif m["nvlink"]:
                out.append(NvLinkRequirement(gpus=at, min_links=_number(m["links"] or "1", "nvlink>=", 1, MAX_NVLINKS)))
            else:
                out.append(LinkRequirement(gpus=at, need=m["cls"]))
        except RequirementError as exc:
            raise RequirementError(f"term {show_value(term)}: {exc}\n{REQUIRE_GRAMMAR}") from None
    return tuple(out)
