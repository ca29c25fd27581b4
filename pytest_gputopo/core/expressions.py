"""Run-level requirement expressions: ``--gputopo-require "gpus>=8,p2p,link>=NV18"`` -> requirements."""

from __future__ import annotations

import re

from . import numtext
from .fact_requirements import NoFallbackRequirement
from .gpu_requirements import VERSIONS, GpuRequirement, VersionRequirement
from .limits import MAX_GPUS, MAX_NVLINKS, show_value
from .requirements import (
    LinkRequirement,
    NvLinkRequirement,
    P2PRequirement,
    Requirement,
    RequirementError,
)

REQUIRE_GRAMMAR = """\
  EXPR  := TERM ("," TERM)*
  TERM  := "gpus>=" N
         | "p2p" [@N]                  every pair can do P2P read and write
         | "nvlink" [">=" LINKS] [@N]  every pair has at least LINKS NVLinks (default 1)
         | "link>=" CLASS [@N]         every pair is linked at CLASS or better
         | "no-fallback" [@N]          no pair that deserves P2P falls back to SHM or the network
         | "memory>=" GB [@N]          every GPU has at least GB GB of memory (1e9 bytes)
         | "cc" OP VERSION [@N]        every GPU's compute capability, e.g. cc>=9.0
         | "arch" ("=" | ">=") ARCH [@N]   every GPU is (at least) ARCH, e.g. arch>=hopper
         | "model=" TEXT [@N]          every GPU's name contains TEXT, e.g. model=H100
         | "bf16" [@N]                 every GPU computes bf16 natively (compute capability 8.0+)
         | "multicast" [@N]            every GPU supports multicast (NVLS, NVLink SHARP)
         | "healthy" [@N]              no GPU has a health fault at rest (ECC, row remapping, clocks)
         | VERSION_OF OP VERSION       driver, cuda (the driver's), cuda_runtime (torch's), nccl
  CLASS := NV | NV<links> | PIX | PXB | PHB | NODE | SYS   (order: NV# > PIX > PXB > PHB > NODE > SYS)
  ARCH  := kepler | maxwell | pascal | volta | turing | ampere | ada | hopper | blackwell
  OP    := >= | <= | == | != | > | < | ~=   (a version specifier, as pip reads it)
  @N    := among the first N GPUs only (default: all visible GPUs)
  N, LINKS := ASCII digits; gpus>= 0..1024, @N 1..1024, LINKS 1..36
  example: gpus>=8,p2p,link>=NV18,cc>=9.0,nccl>=2.18"""

# [0-9], not \d: "١٢" is no number here. Two-character operators before one-character ones.
_TERM_RE = re.compile(
    r"^(?P<name>[a-z][a-z0-9_-]*)\s*(?:(?P<op>>=|<=|==|!=|~=|>|<|=)\s*(?P<value>[^@]*?))?"
    r"\s*(?:@\s*(?P<at>[0-9]+))?$",
    re.IGNORECASE,
)
_FLAGS = {"p2p": P2PRequirement, "no-fallback": NoFallbackRequirement}
_GPU_FLAGS = ("bf16", "multicast", "healthy")


def _number(text: str, what: str, low: int, high: int) -> int:
    value = numtext.read_int(text, low, high)
    if value is None:
        raise RequirementError(
            f"{what} must be an integer from {low} to {high}, got {text[:20]}" + ("..." if len(text) > 20 else "")
        )
    return value


def _gb(text: str) -> float:
    try:
        return float(text) if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", text) else float("nan")
    except ValueError:  # pragma: no cover - the pattern admits only what float reads
        return float("nan")


def _term(name: str, op: str | None, value: str | None, at: int | None) -> Requirement:
    def needs(*ops: str | None) -> None:
        if op not in ops:
            raise RequirementError(f"{name} takes {' or '.join(repr(o) for o in ops if o) or 'no operator'}")

    if name == "gpus":
        needs(">=")
        if at is not None:
            raise RequirementError("'@N' does not apply to gpus>=")
        return GpuRequirement(gpus=_number(value, "gpus>=", 0, MAX_GPUS))  # type: ignore[arg-type]  # a value wherever an operator is (parse_expression)
    if name in _FLAGS or name in _GPU_FLAGS:
        needs(None)
        return _FLAGS[name](gpus=at) if name in _FLAGS else GpuRequirement(gpus=at, **{name: True})  # type: ignore[arg-type]  # the flag's own keyword
    if name == "nvlink":
        needs(None, ">=")
        return NvLinkRequirement(gpus=at, min_links=_number(value or "1", "nvlink>=", 1, MAX_NVLINKS))
    if name == "link":
        needs(">=")
        return LinkRequirement(gpus=at, need=value)  # type: ignore[arg-type]  # a value wherever an operator is (parse_expression)
    if name == "memory":
        needs(">=")
        return GpuRequirement(gpus=at, min_memory_gb=_gb(value))  # type: ignore[arg-type]  # a value wherever an operator is (parse_expression)
    if name == "cc":
        return GpuRequirement(gpus=at, compute_capability=f"{op}{value}")
    if name == "arch":
        needs("=", ">=")
        return GpuRequirement(gpus=at, arch=value if op == "=" else f">={value}")  # type: ignore[arg-type]  # a value: see parse_expression; a str normalized by the requirement
    if name == "model":
        needs("=")
        return GpuRequirement(gpus=at, model=value)  # type: ignore[arg-type]  # a value wherever an operator is (parse_expression)
    if name in VERSIONS:
        if at is not None:
            raise RequirementError(f"'@N' does not apply to {name}")
        if op is None:
            raise RequirementError(f"{name} takes an operator and a version, e.g. {name}>=2.18")
        return VersionRequirement(**{name: f"{op}{value}"})  # type: ignore[arg-type]  # name is one of VERSIONS
    raise RequirementError(f"unknown term {name!r}")


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
            op = m["op"]
            if op is not None and not m["value"]:
                raise RequirementError(f"nothing after {op!r}")
            out.append(_term(m["name"].lower(), op, m["value"], at))
        except RequirementError as exc:
            raise RequirementError(f"term {show_value(term)}: {exc}\n{REQUIRE_GRAMMAR}") from None
    return tuple(out)
