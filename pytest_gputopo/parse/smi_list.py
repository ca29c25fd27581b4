"""Read ``nvidia-smi -L`` (``--list-gpus``): one line per GPU, ``GPU <i>: <name> (UUID: GPU-…)``, and
under a GPU in MIG mode one line per MIG device, ``  MIG <profile> Device <n>: (UUID: MIG-…)`` (the
forms of NVIDIA's nvidia-smi manual page and MIG user guide; the first MIG drivers printed no profile,
``  MIG Device <n>: (UUID: MIG-GPU-…/<gi>/<ci>)``, as NVIDIA/nvidia-container-toolkit
cmd/nvidia-container-runtime.experimental/README.md @ cf192169a8982fccf168ada86acfce54dc0984eb shows).
A MIG device listed under a GPU says its MIG mode is enabled, and each is kept (``model.MigDevice``:
its profile, number and UUID, and the early UUID's instance ids); none listed says nothing (MIG may be
on with no instance made). A line of no such form is a warning naming its line; text with no GPU line
is refused, and another tool's text naming it (``parse.which_tool``; ``nvlink -s`` prints -L's lines
with its links under them)."""

from __future__ import annotations

import re
from typing import Any

from ..core.limits import MAX_GPUS, MAX_MIG_DEVICES
from ..core.model import MigDevice
from .smi_gpus import SmiGpu, SmiGpus
from .which_tool import refusal

TOOL = "nvidia-smi -L"


class SmiListParseError(ValueError):
    """Text that is not nvidia-smi -L output; the message says why."""


# ASCII digits only; the name is all before the last "(UUID:" (names hold no such thing).
_GPU_RE = re.compile(r"GPU ([0-9]{1,4}): (.*) \(UUID: (GPU-[0-9A-Fa-f-]{8,64})\)")
# The profile is absent on early drivers, whose UUID ends in the GPU and compute instance ids.
_MIG_RE = re.compile(r"MIG (?:(\S+) +)?Device +([0-9]{1,3}): \(UUID: (MIG-[^\s()]{1,80})\)")
_EARLY_MIG_UUID_RE = re.compile(r"MIG-GPU-[0-9A-Fa-f-]{8,64}/([0-9]{1,4})/([0-9]{1,4})")


def _mig_device(profile: str | None, index: str, uuid: str) -> MigDevice:
    early = _EARLY_MIG_UUID_RE.fullmatch(uuid)
    return MigDevice(
        index=int(index),
        uuid=uuid,
        profile=profile,
        gpu_instance_id=int(early.group(1)) if early else None,
        compute_instance_id=int(early.group(2)) if early else None,
    )


def parse_smi_list(text: str) -> SmiGpus:
    """The GPUs ``nvidia-smi -L`` listed (see the module docstring). ``attached`` is their number when
    they are numbered 0..n-1 (-L lists every GPU it sees unless ``-i`` picked some: such a listing is
    refused where it is joined, as another GPU count), None where lines are missing."""
    if not isinstance(text, str):
        raise SmiListParseError(f"expected the text of {TOOL}, got {type(text).__name__}")
    if why := refusal(text, "smi-list"):  # nvlink -s too: it prints -L's lines above its links
        raise SmiListParseError(why)
    notes: list[str] = []
    gpus: dict[int, dict[str, Any]] = {}
    uuids: dict[str, int] = {}
    current: dict[str, Any] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if m := _GPU_RE.fullmatch(line):
            index, name, uuid = int(m.group(1)), m.group(2).strip(), m.group(3)
            if index >= MAX_GPUS:
                notes.append(f"line {number}: GPU index {index} is above {MAX_GPUS - 1}; not read")
                current = None
                continue
            for seen, what in ((gpus, f"GPU {index}"), (uuids, f"UUID {uuid}")):
                key = index if seen is gpus else uuid
                if key in seen:
                    raise SmiListParseError(
                        f"line {number}: {what} is listed twice: not one {TOOL} output (outputs joined?)"
                    )
            uuids[uuid] = index
            gpus[index] = current = {"index": index, "name": name or None, "uuid": uuid}
        elif m := _MIG_RE.fullmatch(line):
            if current is None:
                notes.append(f"line {number}: a MIG device line before any GPU line")
            elif len(current.setdefault("mig_devices", [])) >= MAX_MIG_DEVICES:
                notes.append(f"line {number}: more than {MAX_MIG_DEVICES} MIG devices under one GPU; not read")
            else:
                current["mig"] = True
                current["mig_devices"].append(_mig_device(*m.groups()))
        else:
            notes.append(f"line {number}: not a line of {TOOL}: {line[:40]!r}")
    if not gpus:
        raise SmiListParseError(f"no 'GPU <i>: <name> (UUID: GPU-...)' line: not {TOOL} output")
    # -L lists every GPU nvidia-smi sees, numbered 0..n-1; a gap means lines were lost or cut.
    complete = sorted(gpus) == list(range(len(gpus)))
    if not complete:
        notes.append(f"GPU indices {sorted(gpus)} are not 0..{len(gpus) - 1}: lines missing; the GPU count is unknown")
    for g in gpus.values():
        g["mig_devices"] = tuple(g.get("mig_devices", ()))
    return SmiGpus(
        TOOL,
        tuple(SmiGpu(**g) for g in gpus.values()),
        attached=len(gpus) if complete else None,
        warnings=tuple(dict.fromkeys(notes)),
    )
