"""Requirements on each GPU's own facts and on the software versions: ``requires_gpus`` (count,
memory, compute capability and architecture, model, bf16, multicast) and ``requires_versions``
(driver, CUDA, NCCL). Pure, like every requirement (``core.requirements``): judged on the topology,
the reason naming each GPU that falls short and what it has; an unknown fact is never met.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from . import hardware, health
from .causes import Finding, Unknown
from .limits import MAX_MEMORY_BYTES, show_value
from .model import CUDA, HEALTH, NVML, TORCH, Gpu, Topology
from .requirements import (
    MIG_INSTANCE,
    REASON_PAIRS,
    Requirement,
    RequirementError,
    Verdict,
    gpus_arg,
    gpus_text,
    shortfall,
    unmet,
    visible_text,
)

UNKNOWN = "is unknown (no source reported it)"


def _names(value: object, what: str) -> tuple[str, ...]:
    """A name or a list of names, as a non-empty tuple of non-empty strings."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items or not all(isinstance(v, str) and v.strip() for v in items):
        raise RequirementError(f"{what} must be a name or a list of names, got {show_value(value)}")
    return tuple(v.strip() for v in items)


def _bool_arg(value: object, what: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise RequirementError(f"{what} must be True, False or None, got {show_value(value)}")
    return value


@dataclass(frozen=True)
class GpuRequirement(Requirement):
    """``requires_gpus``: the GPUs named are there (``gpus``: the first n, the listed ones, or None:
    every visible GPU, at least one when a condition is set), and each meets every condition given:
    memory in GB (1e9 bytes), a compute-capability specifier, an architecture or comparisons with one
    (``">=hopper"``, ``"<blackwell"``), a model (a substring of the name or a glob over it, any of a
    list), native bf16, multicast (NVLS), healthy at rest (no ``core.health`` fault; met only where
    NVML gave some health fact)."""

    min_memory_gb: float | None = None
    compute_capability: str | None = None
    arch: tuple[str, ...] | None = None
    model: tuple[str, ...] | None = None
    bf16: bool | None = None
    multicast: bool | None = None
    healthy: bool | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", gpus_arg(self.gpus, low=0, what="n"))
        gb = self.min_memory_gb
        if gb is not None:
            if isinstance(gb, bool) or not isinstance(gb, (int, float)) or not 0 < gb <= MAX_MEMORY_BYTES / hardware.GB:
                raise RequirementError(
                    f"min_memory_gb must be a number of GB (1e9 bytes) above 0 and at most "
                    f"{MAX_MEMORY_BYTES / hardware.GB:g}, got {show_value(gb)}"
                )
            object.__setattr__(self, "min_memory_gb", float(gb))
        if self.compute_capability is not None:
            try:
                hardware.specifier(self.compute_capability)
            except ValueError as exc:
                raise RequirementError(f"compute_capability: {exc}") from None
            object.__setattr__(self, "compute_capability", self.compute_capability.strip())
        if self.arch is not None:
            try:
                object.__setattr__(self, "arch", hardware.arch_spec(self.arch))
            except ValueError as exc:
                raise RequirementError(f"arch must be {exc}, got {show_value(self.arch)}") from None
        if self.model is not None:
            object.__setattr__(self, "model", _names(self.model, "model"))
        _bool_arg(self.bf16, "bf16")
        _bool_arg(self.multicast, "multicast")
        if self.healthy is not None and self.healthy is not True:
            raise RequirementError(f"healthy must be True or None, got {show_value(self.healthy)}")
        if self.gpus == 0 and self.conditions:
            raise RequirementError("conditions on the GPUs need at least one GPU, but n is 0")

    @property
    def conditions(self) -> bool:
        return any(
            v is not None
            for v in (
                self.min_memory_gb,
                self.compute_capability,
                self.arch,
                self.model,
                self.bf16,
                self.multicast,
                self.healthy,
            )
        )

    @property
    def facts(self) -> frozenset[str]:
        facts = {NVML} | ({CUDA} if self.multicast is not None else set())  # multicast: CUDA's
        return frozenset(facts | ({HEALTH} if self.healthy else set()))  # healthy: the node's health read

    def __str__(self) -> str:
        args = [] if self.gpus is None else [gpus_text(self.gpus)]
        args += [f"min_memory_gb={self.min_memory_gb:g}"] if self.min_memory_gb is not None else []
        args += [f"compute_capability={self.compute_capability!r}"] if self.compute_capability else []
        for name in ("arch", "model"):
            value = getattr(self, name)
            if value is not None:
                args.append(f"{name}={value[0]!r}" if len(value) == 1 else f"{name}={list(value)!r}")
        flags = ("bf16", "multicast", "healthy")
        args += [f"{name}={getattr(self, name)}" for name in flags if getattr(self, name) is not None]
        return f"requires_gpus({', '.join(args)})"

    def evaluate(self, topology: Topology, max_pairs: int | None = REASON_PAIRS) -> Verdict:
        if isinstance(self.gpus, int) and len(topology.gpus) < self.gpus:
            return unmet(self, [visible_text(topology)], max_pairs, "GPU")
        missing = shortfall(topology, self.gpus)
        if missing:
            return unmet(self, [missing], max_pairs, "GPU")
        chosen = topology.chosen(self.gpus)
        if self.conditions and not chosen:
            return unmet(self, [f"no GPU to judge: {visible_text(topology)}"], max_pairs, "GPU")
        found = self.findings(topology)
        return unmet(self, found, max_pairs, "GPU") if found else Verdict(True)

    def findings(self, topology: Topology) -> list[Finding]:
        """Each GPU's unmet conditions, naming the GPU (``core.causes``); the count apart: see ``evaluate``."""
        if not self._judged(topology):
            return [Finding(f) for f in self.evaluate(topology, None).failures]
        found = [
            Finding(f"GPU{i} ({topology.gpus[i].name or 'unnamed'}) {problem}", (f"GPU{i}",), problem)
            for i in topology.chosen(self.gpus)
            for problem in self.check_gpu(topology.gpus[i])
        ]
        if self.healthy:  # the node's own faults: a GPU off the bus, an XID the node is to act on
            node = [f.text() for f in health.node_findings(topology) if f.severity == health.FAULT]
            found += [Finding(f"the node is not healthy: {what}", (), what) for what in node]
        return found

    def _judged(self, topology: Topology) -> bool:
        """Whether each GPU is judged (the GPUs named are there, and there is one to judge)."""
        if isinstance(self.gpus, int) and len(topology.gpus) < self.gpus:
            return False
        return not shortfall(topology, self.gpus) and not (self.conditions and not topology.chosen(self.gpus))

    def check_gpu(self, gpu: Gpu) -> list[str]:
        """What is wrong with ``gpu`` for each condition (empty when it meets them all)."""
        problems: list[str] = []
        cc = gpu.compute_capability
        if self.min_memory_gb is not None:
            have = gpu.memory_total_bytes
            if gpu.mig:  # the instance's memory is a slice of the GPU's
                whole = "" if have is None else f", which has a slice of the GPU's {have / hardware.GB:.1f} GB"
                problems.append(Unknown(f"memory is unknown: MIG is enabled ({MIG_INSTANCE}{whole})"))
            elif have is None:
                problems.append(Unknown(f"memory {UNKNOWN}"))
            elif have < self.min_memory_gb * hardware.GB:
                problems.append(f"has {have / hardware.GB:.1f} GB of memory, needs {self.min_memory_gb:g} GB")
        if self.compute_capability is not None:
            meets = hardware.satisfies(cc, self.compute_capability)
            if meets is None:
                problems.append(Unknown(f"compute capability {UNKNOWN}"))
            elif not meets:
                problems.append(f"has compute capability {cc}, needs {self.compute_capability}")
        if self.arch is not None:  # compared by the capability's place among architectures (hardware.arch_meets)
            meets, seen = hardware.arch_meets(cc, self.arch), hardware.arch_text(cc)
            named = "" if hardware.architecture(cc) else ", not in the plugin's table"
            if meets is None and seen == "unknown":
                problems.append(Unknown(f"architecture is unknown (compute capability {cc or 'unknown'})"))
            elif meets is None:
                problems.append(
                    Unknown(
                        f"architecture is unknown (compute capability {cc}{named}: {seen}), "
                        f"needs {' or '.join(self.arch)}"
                    )
                )
            elif not meets:
                problems.append(f"is {seen} (compute capability {cc}{named}), needs {' or '.join(self.arch)}")
        if self.model is not None:
            if gpu.name is None:
                problems.append(Unknown(f"model {UNKNOWN}"))
            elif not any(_model_matches(m, gpu.name) for m in self.model):
                problems.append(f"is not {' or '.join(repr(m) for m in self.model)}")
        if self.bf16 is not None:
            native = hardware.bf16(cc)
            if native is None:
                problems.append(Unknown(f"bf16 support is unknown (compute capability {cc or 'unknown'})"))
            elif native != self.bf16:
                problems.append(
                    f"has {'no ' if not native else ''}native bf16 (compute capability {cc}), "
                    f"needs {'one with' if self.bf16 else 'one without'}"
                )
        if self.multicast is not None:
            if gpu.multicast is None:
                problems.append(Unknown(f"multicast (NVLS) support {UNKNOWN}"))
            elif gpu.multicast != self.multicast:
                problems.append(
                    f"{'has no' if not gpu.multicast else 'has'} multicast (NVLS): CUDA reports "
                    f"CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = {int(gpu.multicast)}"
                )
        if self.healthy:
            problems.extend(_unhealthy(gpu))
        return problems


def _unhealthy(gpu: Gpu) -> list[str]:
    """The GPU's health faults (``core.health``: the check's health item), as one problem; unknown where
    NVML gave no health fact. Warnings (persistence, firmware across the node) are no fault."""
    if gpu.health is None or not gpu.health.known:
        return [Unknown(f"health {UNKNOWN} (NVML reported none of its health facts)")]
    found = [f.text() for f in health.findings(Topology(gpus=(gpu,)), gpu) if f.severity == health.FAULT]
    return [f"is not healthy: {'; '.join(found)}"] if found else []


def _model_matches(model: str, name: str) -> bool:
    """``model`` in the GPU's name, ignoring case; with ``*``, ``?`` or ``[``: a glob over the whole name."""
    if any(c in model for c in "*?["):
        return fnmatch.fnmatchcase(name.lower(), model.lower())
    return model.lower() in name.lower()


VERSIONS = {  # marker argument: (Topology field, what it is)
    "driver": ("driver_version", "the NVIDIA driver"),
    "cuda": ("cuda_driver_version", "the CUDA version the driver supports"),
    "cuda_runtime": ("cuda_runtime_version", "the CUDA torch was built with"),
    "nccl": ("nccl_version", "the NCCL torch loads"),
}


@dataclass(frozen=True)
class VersionRequirement(Requirement):
    """``requires_versions``: each version given is met (``packaging`` specifiers, ``">=2.18"``)."""

    driver: str | None = None
    cuda: str | None = None
    cuda_runtime: str | None = None
    nccl: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        given = [name for name in VERSIONS if getattr(self, name) is not None]
        if not given:
            raise RequirementError(f"name at least one version: {', '.join(f'{n}=' for n in VERSIONS)}")
        for name in given:
            try:
                hardware.specifier(getattr(self, name))
            except ValueError as exc:
                raise RequirementError(f"{name}: {exc}") from None
            object.__setattr__(self, name, getattr(self, name).strip())

    @property
    def facts(self) -> frozenset[str]:
        """NVML knows the driver and the CUDA it supports; only torch knows what it was built with."""
        return frozenset((NVML, TORCH)) if self.cuda_runtime or self.nccl else frozenset((NVML,))

    def __str__(self) -> str:
        return (
            "requires_versions("
            + ", ".join(f"{n}={getattr(self, n)!r}" for n in VERSIONS if getattr(self, n) is not None)
            + ")"
        )

    def evaluate(self, topology: Topology, max_pairs: int | None = REASON_PAIRS) -> Verdict:
        found = self.findings(topology)
        return unmet(self, found, max_pairs, "version") if found else Verdict(True)

    def findings(self, topology: Topology) -> list[Finding]:
        """Each unmet version: about no GPU (``core.causes``); one no source reported, or that is no
        version, is unknown."""
        found = []
        for name, (field, what) in VERSIONS.items():
            spec = getattr(self, name)
            if spec is None:
                continue
            have = getattr(topology, field)
            meets = hardware.satisfies(have, spec)
            if meets is None:
                unknown = UNKNOWN if have is None else f"is {have!r}, no version"
                found.append(Finding(Unknown(f"{what} ({name}) {unknown}")))
            elif not meets:
                found.append(Finding(f"{what} ({name}) is {have}, needs {spec}"))
        return found
