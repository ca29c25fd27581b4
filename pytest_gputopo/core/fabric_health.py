"""What NVML's GPU fabric health mask says, field by field (pure).

``nvmlGpuFabricInfo_v2_t.healthMask`` (and v3's): "GPU Fabric health Status Mask. See
NVML_GPU_FABRIC_HEALTH_MASK_*" (nvml.h 13.3.29, NVIDIA/go-nvml gen/nvml/nvml.h). Each field is read
as nvml.h's ``NVML_GPU_FABRIC_HEALTH_GET(var, type)`` reads it, ``(var >> SHIFT_<type>) & WIDTH_<type>``,
with the shifts, widths and values of nvml.h and of the installed nvidia-ml-py 13.615.71 (pynvml.py
l.7206-7256, which adds the global fabric manager's state at bits 14-15):

| field | bits | values |
|---|---|---|
| degraded bandwidth | 0-1 | 0 not supported, 1 bandwidth degraded, 2 not degraded |
| route recovery | 2-3 | 0 not supported, 1 in progress, 2 not in progress |
| route unhealthy | 4-5 | 0 not supported, 1 route is unhealthy, 2 route is healthy |
| access timeout recovery | 6-7 | 0 not supported, 1 in progress, 2 not in progress |
| incorrect configuration | 8-11 | 0 not supported, 1 none (correct), 2 SysGUID, 3 chassis serial number, |
| | | 4 no partition, 5 insufficient NVLinks, 6 incompatible GPU firmware, 7 invalid location, |
| | | 8 GPU state invalid |
| partition assigned | 12-13 | 0 not supported, 1 assigned, 2 not assigned |
| global fabric manager | 14-15 | 0 not supported, 1 connected, 2 disconnected (pynvml only) |

A field's fault value (bandwidth degraded, a recovery in progress, a route unhealthy, a configuration
that is incorrect) is a problem of the GPU's fabric; a value nvml.h does not define is unknown, never
taken as healthy; "not supported" says nothing. Whether a partition is assigned and whether the global
fabric manager is connected are said, not judged (nvml.h gives them no healthy value of their own).
"""

from __future__ import annotations

from dataclasses import dataclass

UINT32 = 2**32 - 1


@dataclass(frozen=True)
class _Field:
    name: str  # as the message names it
    shift: int
    width: int  # the mask after the shift (NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_*)
    said: dict[int, str]  # value -> words; 0 (not supported) is absent
    faults: frozenset[int]  # the values that are a problem of the fabric
    judged: bool = True  # False: said, never a fault


FIELDS = (
    _Field("degraded bandwidth", 0, 0x3, {1: "bandwidth degraded", 2: "bandwidth not degraded"}, frozenset({1})),
    _Field("route recovery", 2, 0x3, {1: "route recovery in progress", 2: "no route recovery"}, frozenset({1})),
    _Field("route unhealthy", 4, 0x3, {1: "route unhealthy", 2: "route healthy"}, frozenset({1})),
    _Field(
        "access timeout recovery",
        6,
        0x3,
        {1: "access timeout recovery in progress", 2: "no access timeout recovery"},
        frozenset({1}),
    ),
    _Field(
        "incorrect configuration",
        8,
        0xF,
        {
            1: "configuration correct",
            2: "incorrect configuration: SysGUID",
            3: "incorrect configuration: chassis serial number",
            4: "incorrect configuration: no partition",
            5: "incorrect configuration: insufficient NVLinks",
            6: "incorrect configuration: incompatible GPU firmware",
            7: "incorrect configuration: invalid location",
            8: "incorrect configuration: GPU state invalid",
        },
        frozenset(range(2, 9)),
    ),
    _Field("partition assigned", 12, 0x3, {1: "partition assigned", 2: "partition not assigned"}, frozenset(), False),
    _Field(
        "global fabric manager",
        14,
        0x3,
        {1: "global fabric manager connected", 2: "global fabric manager disconnected"},
        frozenset(),
        False,
    ),
)
_READ_BITS = 16  # the fields above end at bit 15


@dataclass(frozen=True)
class Health:
    """A health mask read: ``problems`` (the fault values, in words), ``unknown`` (fields whose value
    nvml.h does not define, named), ``said`` (every field reported, in words, problems included)."""

    problems: tuple[str, ...]
    unknown: tuple[str, ...]
    said: tuple[str, ...]

    @property
    def reported(self) -> bool:
        """Whether any field says anything (a mask of 0 reports every field "not supported")."""
        return bool(self.said or self.unknown)

    def text(self) -> str:
        """The fields reported, in words, for a check's message."""
        return ", ".join(self.said + tuple(f"{u} (not a value nvml.h defines)" for u in self.unknown))


def read(mask: int) -> Health:
    """The fields of ``mask`` (a ``healthMask`` as NVML filled it), each by nvml.h's rule."""
    problems, unknown, said = [], [], []
    for f in FIELDS:
        value = (mask >> f.shift) & f.width
        if value == 0:
            continue  # not supported: says nothing
        if value not in f.said:
            unknown.append(f"{f.name} {value}")
            continue
        said.append(f.said[value])
        if f.judged and value in f.faults:
            problems.append(f.said[value])
    return Health(tuple(problems), tuple(unknown), tuple(said))


def problem(mask: int | None) -> str | None:
    """Why the fabric is not healthy by its mask, in words; None when nothing in it is a fault (or no
    mask was read: unknown, which the caller says as unknown, never as healthy)."""
    if mask is None:
        return None
    found = read(mask).problems
    return f"NVLink fabric unhealthy (NVML's health mask: {', '.join(found)})" if found else None


def undocumented_bits(mask: int) -> int:
    """The bits set above the fields nvml.h defines (not read)."""
    return mask >> _READ_BITS
