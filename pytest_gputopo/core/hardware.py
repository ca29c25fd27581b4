"""What a GPU's recorded facts mean for the conditions suites gate on: its architecture (named from
the compute capability), native bf16, memory in GB, and version specifiers (``packaging``'s, as pip
reads them) for compute capability, driver, CUDA and NCCL versions.

Pure: an unknown fact (None, or text that is no version such as ``"N/A"``) gives None, never a guess.
"""

from __future__ import annotations

import functools

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

# Architectures by compute capability (major, minor), oldest first; the names NVIDIA's CUDA GPU table
# gives. A capability not listed (a newer GPU than this table) has no name: unknown, never a guess.
ARCHITECTURES = (
    ("kepler", ((3, 0), (3, 2), (3, 5), (3, 7))),
    ("maxwell", ((5, 0), (5, 2), (5, 3))),
    ("pascal", ((6, 0), (6, 1), (6, 2))),
    ("volta", ((7, 0), (7, 2))),
    ("turing", ((7, 5),)),
    ("ampere", ((8, 0), (8, 6), (8, 7), (8, 8))),
    ("ada", ((8, 9),)),
    ("hopper", ((9, 0),)),
    ("blackwell", ((10, 0), (10, 1), (10, 3), (11, 0), (12, 0), (12, 1))),
)
ARCH_NAMES = tuple(name for name, _ in ARCHITECTURES)
_ARCH_OF = {cc: name for name, ccs in ARCHITECTURES for cc in ccs}

# Native bf16 arithmetic starts with Ampere (sm_80): torch.cuda.is_bf16_supported(including_emulation=
# False) is "CUDA >= 11 and major >= 8" (torch/cuda/__init__.py); Lightning's RunIf(bf16_cuda=True) asks it.
BF16_FROM = (8, 0)

GB = 1e9  # memory in GB as GPUs are sold: an "80GB" H100 has 85.5e9 bytes (79.6 GiB)


def capability(cc: str | None) -> tuple[int, int] | None:
    """``"9.0"`` -> (9, 0); None for an unknown or unreadable capability."""
    if not cc:
        return None
    major, _, minor = cc.partition(".")
    if not (major.isascii() and major.isdigit() and minor.isascii() and minor.isdigit()):
        return None
    return int(major), int(minor)


def architecture(cc: str | None) -> str | None:
    """The architecture's name (``"hopper"``) for a compute capability; None when unknown."""
    known = capability(cc)
    return None if known is None else _ARCH_OF.get(known)


def bf16(cc: str | None) -> bool | None:
    """Whether the GPU computes in bf16 natively; None when its capability is unknown."""
    known = capability(cc)
    return None if known is None else known >= BF16_FROM


def version(text: str | None) -> Version | None:
    """A fact's version (``"570.124.06"``, ``"12.8"``, ``"2.21.5"``); None for unknown or unreadable."""
    if not text:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def specifier(text: str) -> SpecifierSet:
    """``">=2.18"``, ``">=12.1,<13"``, ``"==9.*"``; raises ValueError saying how to write one (a bare
    version is refused: ``"9.0"`` could mean exactly or at least)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"expected a version specifier such as '>=2.18', got {text!r}")
    return _specifier(text)


@functools.lru_cache(maxsize=256)
def _specifier(text: str) -> SpecifierSet:
    try:
        spec = SpecifierSet(text)
    except InvalidSpecifier:
        hint = f" (write '>={text.strip()}' or '=={text.strip()}')" if version(text.strip()) else ""
        raise ValueError(f"{text!r} is not a version specifier such as '>=2.18' or '>=12.1,<13'{hint}") from None
    if not len(spec):
        raise ValueError(f"expected a version specifier such as '>=2.18', got {text!r}")
    return spec


def satisfies(fact: str | None, spec: str) -> bool | None:
    """Whether a fact's version meets ``spec`` (pre-releases included: a driver's or NCCL's own
    version is what runs); None when the fact is unknown."""
    have = version(fact)
    return None if have is None else specifier(spec).contains(have, prereleases=True)
