"""What a GPU's recorded facts mean for the conditions suites gate on: its architecture (named from
the compute capability) and comparisons with it (``arch=">=hopper"``), native bf16, memory in GB, and
version specifiers (``packaging``'s, as pip
reads them) for compute capability, driver, CUDA and NCCL versions.

Pure: an unknown fact (None, or text that is no version such as ``"N/A"``) gives None, never a guess.
"""

from __future__ import annotations

import functools
import operator
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

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
_TABLE = sorted(_ARCH_OF)  # every capability the table names, ascending
_INDEX = {name: i for i, name in enumerate(ARCH_NAMES)}

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


# Compute capability by the GPU name nvidia-smi prints (--query-gpu's ``name``, -q -x's ``product_name``,
# -L's and nvlink -s's headers), from NVIDIA's list "CUDA GPU Compute Capability"
# (https://developer.nvidia.com/cuda-gpus). A name is matched whole, ignoring case, after a leading
# "NVIDIA " or "Tesla " (brands nvidia-smi prints or not, by driver): a model, then nothing or a suffix
# after a space or hyphen (form factor, memory: "H100 80GB HBM3", "A100-SXM4-40GB", "RTX PRO 6000
# Blackwell Server Edition"). A model that is a prefix of another chip's name is listed whole, without
# suffixes ("Quadro RTX 6000" is Turing, "RTX 6000 Ada Generation" Ada). Names the list does not give
# (A10G, A800, H800, H20, V100S) have no capability here: unknown, never a guess.
_CAPABILITY_OF_MODEL = {
    "12.1": ("GB10",),
    "12.0": (
        "RTX PRO 6000 Blackwell",
        "RTX PRO 5000 Blackwell",
        "RTX PRO 4500 Blackwell",
        "RTX PRO 4000 Blackwell",
        "GeForce RTX 5090",
        "GeForce RTX 5080",
        "GeForce RTX 5070 Ti",
        "GeForce RTX 5070",
        "GeForce RTX 5060 Ti",
        "GeForce RTX 5060",
    ),
    "10.3": ("GB300", "B300"),
    "10.0": ("GB200", "B200"),
    "9.0": ("GH200", "H200", "H100"),
    "8.9": (
        "L40S",
        "L40",
        "L4",
        "RTX 6000 Ada Generation",
        "RTX 5000 Ada Generation",
        "RTX 4500 Ada Generation",
        "RTX 4000 Ada Generation",
        "RTX 4000 SFF Ada Generation",
        "GeForce RTX 4090",
        "GeForce RTX 4080",
        "GeForce RTX 4070 Ti",
        "GeForce RTX 4070",
        "GeForce RTX 4060 Ti",
        "GeForce RTX 4060",
    ),
    "8.6": (
        "A40",
        "A10",
        "A16",
        "A2",
        "RTX A6000",
        "RTX A5000",
        "RTX A4500",
        "RTX A4000",
        "RTX A2000",
        "GeForce RTX 3090 Ti",
        "GeForce RTX 3090",
        "GeForce RTX 3080 Ti",
        "GeForce RTX 3080",
        "GeForce RTX 3070 Ti",
        "GeForce RTX 3070",
        "GeForce RTX 3060 Ti",
        "GeForce RTX 3060",
    ),
    "8.0": ("A100", "A30"),
    "7.5": (
        "T4",
        "Quadro RTX 8000",
        "Quadro RTX 6000",
        "Quadro RTX 5000",
        "Quadro RTX 4000",
        "TITAN RTX",
        "GeForce RTX 2080 Ti",
        "GeForce RTX 2080",
        "GeForce RTX 2070",
        "GeForce RTX 2060",
    ),
    "7.0": ("V100", "TITAN V", "Quadro GV100"),
    "6.1": ("P40", "P4", "TITAN Xp", "GeForce GTX 1080 Ti", "GeForce GTX 1080", "GeForce GTX 1070"),
    "6.0": ("P100", "Quadro GP100"),
    "3.7": ("K80",),
}
# Listed whole: each is also the start of another chip's name ("RTX 6000 Ada Generation" is Ada).
_WHOLE_NAMES = ("Quadro RTX 8000", "Quadro RTX 6000", "Quadro RTX 5000", "Quadro RTX 4000")
_NAME_PREFIX = re.compile(r"(?:nvidia\s+)?(?:tesla\s+)?")


def _model_pattern(model: str) -> str:
    words = r"\s+".join(map(re.escape, model.lower().split()))
    return words if model in _WHOLE_NAMES else words + r"(?:[\s-].*)?"


@functools.cache
def _model_res() -> tuple[tuple[re.Pattern[str], str], ...]:
    """The table's names as patterns, compiled on first use: a run that reads no nvidia-smi text (every
    marked run) never pays for them."""
    return tuple(
        (re.compile(_model_pattern(model)), cc) for cc, models in _CAPABILITY_OF_MODEL.items() for model in models
    )


def capability_of_name(name: str | None) -> str | None:
    """The compute capability NVIDIA's CUDA GPU list gives the GPU nvidia-smi names ``name``
    (``"NVIDIA H200"`` -> ``"9.0"``); None for a name the table does not list."""
    if not isinstance(name, str):
        return None
    text = name.strip().lower()
    text = text[_NAME_PREFIX.match(text).end() :]  # type: ignore[union-attr]  # an optional prefix: always matches
    found = {cc for pattern, cc in _model_res() if pattern.fullmatch(text)}
    return found.pop() if len(found) == 1 else None  # two capabilities would be a table error: unknown


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
    # packaging is imported where a version is read (a boundary of the load budget, docs/performance.md):
    # a marked run whose requirements name no version or capability specifier never imports it
    from packaging.version import InvalidVersion, Version

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
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # where a specifier is read, as in ``version``

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


# Architecture comparisons: ``">=hopper"``, ``"<blackwell"``, ``"!=hopper"``, ``"==ampere"`` or a bare name
# (equal), several joined by "," (all must hold), a list of those (any). Two-character operators first.
_ARCH_OPS = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
}
_CLAUSE = re.compile(r"(<=|>=|==|!=|<|>)?([a-z]+)")
ARCH_HOW = (
    f"one of {', '.join(ARCH_NAMES)}, with an optional comparison (<, <=, ==, !=, >=, >; e.g. '>=hopper', "
    "'<blackwell'), several joined by ',' (all must hold: '>=ampere,<=ada'), or a list of those (any)"
)


def arch_spec(value: object) -> tuple[str, ...]:
    """An ``arch=`` argument as a tuple of conditions, any of which may hold, each lowercase without
    spaces (``"hopper"``, ``">=ampere,<=ada"``); raises ValueError saying how to write one."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items or not all(isinstance(v, str) for v in items):
        raise ValueError(ARCH_HOW)
    out = tuple(re.sub(r"\s+", "", v).lower() for v in items)
    for item in out:
        for clause in item.split(","):
            m = _CLAUSE.fullmatch(clause)
            if not m or m[2] not in _INDEX:
                raise ValueError(ARCH_HOW)
    return out


def _place(name: str) -> int:
    return 2 * _INDEX[name] + 1


def arch_places(cc: str | None) -> range | None:
    """Where the GPU's architecture can lie in the table's order: ``2i + 1`` is ``ARCH_NAMES[i]``, an even
    place an architecture the table does not name (older than the first, between two, newer than the last).

    NVIDIA numbers capabilities in the order of its architectures, so a capability the table does not
    name lies between its neighbours in the table: inside one architecture's span (10.2: Blackwell), it is
    that architecture; in a gap (9.5), either neighbour or one between; past the table (13.0), the last
    architecture or a newer one. None when the capability is unknown."""
    known = capability(cc)
    if known is None:
        return None
    below = [c for c in _TABLE if c <= known]
    above = [c for c in _TABLE if c >= known]
    low = _place(_ARCH_OF[below[-1]]) if below else 0
    high = _place(_ARCH_OF[above[0]]) if above else 2 * len(ARCH_NAMES)
    return range(low, high + 1)


def arch_meets(cc: str | None, spec: tuple[str, ...]) -> bool | None:
    """Whether the GPU's architecture meets ``spec`` (from ``arch_spec``): True or False when it does or
    does not for every architecture the capability can be (``">=hopper"`` holds for 13.0: Blackwell or
    newer), None when that depends on which (``"blackwell"`` for 13.0) or the capability is unknown."""
    places = arch_places(cc)
    if places is None:
        return None
    # arch_spec wrote each clause: every one matches.
    items = [
        [(_ARCH_OPS[m[1] or "=="], _place(m[2])) for m in map(_CLAUSE.fullmatch, item.split(","))]  # type: ignore[index]
        for item in spec
    ]
    verdicts = {any(all(op(p, a) for op, a in item) for item in items) for p in places}
    return verdicts.pop() if len(verdicts) == 1 else None


def arch_text(cc: str | None) -> str:
    """What the capability says of the architecture: ``"Hopper"``, ``"Blackwell or newer"``,
    ``"Hopper, Blackwell or one between"``, ``"unknown"``."""
    places = arch_places(cc)
    if places is None:
        return "unknown"
    named = [ARCH_NAMES[p // 2].title() for p in places if p % 2]
    if len(places) == 1:
        return named[0]
    if places[0] == 0:
        return f"{named[0]} or older"
    if places[-1] == 2 * len(ARCH_NAMES):
        return f"{named[0]} or newer"
    return f"{', '.join(named)} or one between"
