"""Read the text of ``nvidia-smi nvlink -s`` (``--status``; ``-i <gpu>`` prints one GPU only).

Per GPU, a header ``GPU <i>: <name> (UUID: GPU-…)``, then one line per link, indented with a tab and
a space: ``\\t Link <n>: <speed> GB/s`` (``25`` on A100, ``25.781`` on V100, ``53.125`` on GB200: the
speed as nvidia-smi prints it) or ``\\t Link <n>: <inactive>`` for a link that is down. A GPU whose
links are all unused gets, instead, ``NVML: Unable to retrieve NVLink information as all links are
inActive`` (that spelling), which does not say how many links it has; a GPU without NVLink gets
nothing under its header. The shapes come from published captures (see the project's reference
notes, section 2.4); nothing here is tuned to one of them. Publications lose the indentation, expand
the tab to spaces, elide lines (``....``) and cut the text short: whatever can be read is returned,
every line that could not be is a warning naming its line number. Text with no GPU header followed by
a link line (or the all-inactive line) is an ``NvlinkStatusParseError``, and so is one UUID under two
GPU indices (a UUID names one GPU: such text joins captures whose GPUs were numbered otherwise, as in
a container and on its host, so no index can be trusted); nothing else is raised.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..core.units import counted
from .cells import INT_RE, BadCell, cell_float
from .which_tool import refusal

__all__ = [
    "NvlinkStatusParseError",
    "LinkState",
    "GpuLinks",
    "NvlinkStatus",
    "parse_nvlink_status",
    "MAX_LINK",
    "MAX_GPU_INDEX",
    "ALL_INACTIVE_LINE",
]

MAX_LINK = 63  # NVML_NVLINK_MAX_LINKS is 18 today; room for later parts, not for garbage
MAX_GPU_INDEX = 1023
ALL_INACTIVE_LINE = "NVML: Unable to retrieve NVLink information as all links are inActive"
MAX_WARNINGS = 100  # a long foreign text gets this many warnings, then a count of the rest

# ASCII digits only: ``\d`` would take other scripts' digits, which nvidia-smi never prints. The
# colon must end the token: ``GPU 00000000:07:00.0`` (nvidia-smi -q) is no header.
_HEADER_RE = re.compile(r"GPU\s*([0-9]+)\s*:(?=\s|$)")
_LINK_RE = re.compile(r"Link\s+([0-9]+)\s*:")
_ALL_INACTIVE_RE = re.compile(r"all\s*links\s*are\s*inactive", re.IGNORECASE)
# nvidia-smi -L also lists MIG instances under their GPU ("  MIG 1g.5gb  Device  0: (UUID: MIG-…)").
_MIG_RE = re.compile(r"MIG\s.*Device\s*[0-9]+\s*:")
# "<inactive>" as printed; HTML-escaped or with its brackets stripped by a publication.
_INACTIVE = ("<inactive>", "&lt;inactive&gt;", "inactive")
_UUID_OPEN = "(UUID:"


class NvlinkStatusParseError(ValueError):
    """The text holds no ``nvidia-smi nvlink -s`` output; the message is one line saying why."""


@dataclass(frozen=True)
class LinkState:
    link: int  # the link number as printed
    active: bool  # False for "<inactive>"
    gbps: float | None  # the printed speed (GB/s as nvidia-smi prints it); None when inactive

    def to_json(self) -> dict[str, Any]:
        gbps = self.gbps if isinstance(self.gbps, (int, float)) and math.isfinite(self.gbps) else None
        return {"link": self.link, "active": self.active, "gbps": gbps}


@dataclass(frozen=True)
class GpuLinks:
    index: int  # nvidia-smi's GPU index (NVML's)
    name: str | None
    uuid: str | None  # "GPU-fde0a018-..." or None when not printed
    links: tuple[LinkState, ...]  # in the order printed
    all_inactive: bool = False  # the "all links are inActive" line (how many links, nvidia-smi does not say)

    @property
    def active_links(self) -> int:
        return sum(1 for link in self.links if link.active)

    @property
    def inactive_links(self) -> int:
        """Links printed ``<inactive>``; a GPU with the all-inactive line has none printed (0)."""
        return sum(1 for link in self.links if not link.active)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "all_inactive": self.all_inactive,
            "active_links": self.active_links,
            "inactive_links": self.inactive_links,
            "links": [link.to_json() for link in self.links],
        }


@dataclass(frozen=True)
class NvlinkStatus:
    gpus: tuple[GpuLinks, ...]
    # Lines that could not be read ("line 7: ..."), a link or GPU listed twice; deduplicated.
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"gpus": [gpu.to_json() for gpu in self.gpus], "warnings": list(self.warnings)}


# ---------------------------------------------------------------------------------------------


def _short(line: str) -> str:
    return repr(line.strip()[:40])


def _index(digits: str) -> int | None:
    # INT_RE's 19 digits keep int() away from a huge string (and its digit-count limit).
    return int(digits) if INT_RE.fullmatch(digits) else None


@dataclass
class _Gpu:
    index: int
    name: str | None
    uuid: str | None
    links: dict[int, LinkState]  # link number -> LinkState, first-seen order
    all_inactive: bool = False

    def freeze(self) -> GpuLinks:
        return GpuLinks(self.index, self.name, self.uuid, tuple(self.links.values()), self.all_inactive)


def _header_rest(rest: str, where: str, notes: list[str]) -> tuple[str | None, str | None]:
    """Name and UUID from what follows ``GPU <i>:``. The name is all before the last ``(UUID:``
    (names hold no such thing); a UUID cut short (no ``)``) or elided (``...``) is not printed."""
    rest = rest.strip()
    at = rest.rfind(_UUID_OPEN)
    if at < 0:
        opened = rest.rfind("(")
        if opened >= 0 and _UUID_OPEN.startswith(rest[opened:]):  # "(UU": cut before the UUID
            notes.append(f"{where}: the header is cut short; its UUID is not printed")
            rest = rest[:opened].strip()
        return rest or None, None
    name = rest[:at].strip() or None
    inside = rest[at + len(_UUID_OPEN) :]
    if not inside.endswith(")"):
        notes.append(f"{where}: the UUID is cut short; read as not printed")
        return name, None
    uuid = inside[:-1].strip()
    if not uuid.startswith("GPU-") or any(c.isspace() or c in "()" for c in uuid):
        notes.append(f"{where}: UUID {uuid[:40]!r} is not a GPU UUID; read as not printed")
        return name, None
    return name, uuid


def _link_state(number: int, value: str, where: str, notes: list[str]) -> LinkState | None:
    """The state after ``Link <n>:``, or None (with a note) when it is not one nvidia-smi prints."""
    value = value.strip()
    if value.lower() in _INACTIVE:
        return LinkState(number, False, None)
    if not value:
        # Markdown and HTML eat "<inactive>" as a tag; guessing it back would invent a state.
        notes.append(f"{where}: link {number} has no state (an '<inactive>' lost to HTML?); not read")
        return None
    if not value.endswith("GB/s"):
        notes.append(f"{where}: link {number} reads {value[:40]!r}, not '<speed> GB/s' or '<inactive>'; not read")
        return None
    token = value[: -len("GB/s")].strip()
    cell_notes: list[str] = []
    try:
        gbps = cell_float(token, cell_notes) if token.isascii() else None
    except BadCell:
        gbps = None
    if gbps is None or not math.isfinite(gbps) or gbps <= 0:
        notes.append(f"{where}: link {number} speed {token[:40]!r} GB/s is not a positive number; not read")
        return None
    return LinkState(number, True, gbps)


def parse_nvlink_status(text: str) -> NvlinkStatus:
    """The GPUs and link states of ``nvidia-smi nvlink -s`` output (see the module docstring).
    Link numbers above ``MAX_LINK`` and GPU indices above ``MAX_GPU_INDEX`` are warnings, not
    read; a link or GPU printed twice keeps its last state, in the place it first appeared."""
    if not isinstance(text, str):
        raise NvlinkStatusParseError(f"expected the text of nvidia-smi nvlink -s, got {type(text).__name__}")
    if why := refusal(text, "nvlink-status"):  # -L's GPU lines, with no link under them, among others
        raise NvlinkStatusParseError(why)
    notes: list[str] = []
    gpus: dict[int, _Gpu] = {}
    current: _Gpu | None = None
    skipping = False  # under a header that was not read: its links belong to no GPU kept
    headers = link_lines = other_lines = 0
    uuid_at: dict[str, tuple[int, int]] = {}  # UUID -> (GPU index, line) of the header that printed it
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        where = f"line {number}"
        if m := _HEADER_RE.match(line):
            headers += 1
            index = _index(m.group(1))
            if index is None or index > MAX_GPU_INDEX:
                notes.append(f"{where}: GPU index {m.group(1)[:20]} is above {MAX_GPU_INDEX}; its links are not read")
                current, skipping = None, True
                continue
            name, uuid = _header_rest(line[m.end() :], where, notes)
            other, at = uuid_at.get(uuid, (index, 0)) if uuid else (index, 0)
            if uuid and other != index and other in gpus and gpus[other].uuid == uuid:
                raise NvlinkStatusParseError(
                    f"{where}: GPU {index} has the UUID of GPU {other} (line {at}), {uuid[:48]}: a UUID names one "
                    f"GPU, so this is not one nvidia-smi nvlink -s capture (outputs numbered otherwise joined?)"
                )
            if uuid:
                uuid_at[uuid] = (index, number)
            if index in gpus:
                notes.append(f"{where}: GPU {index} is listed twice; the last listing is kept")
            gpus[index] = current = _Gpu(index, name, uuid, {})  # a repeated key keeps its first place
            skipping = False
        elif m := _LINK_RE.match(line):
            link_lines += 1
            if skipping:
                continue
            if current is None:
                notes.append(f"{where}: a link line before any GPU header: {_short(raw)}")
                continue
            link = _index(m.group(1))
            if link is None or link > MAX_LINK:
                notes.append(f"{where}: link number {m.group(1)[:20]} is above {MAX_LINK}; not read")
                continue
            state = _link_state(link, line[m.end() :], where, notes)
            if state is None:
                continue
            if link in current.links:
                notes.append(f"{where}: GPU {current.index} link {link} is listed twice; the last one is kept")
            current.links[link] = state
        elif _ALL_INACTIVE_RE.search(line):
            if current is not None:
                current.all_inactive = True
            elif not skipping:
                notes.append(f"{where}: an all-links-inactive line before any GPU header")
        else:
            if not _MIG_RE.match(line):
                other_lines += 1
            notes.append(f"{where}: not a line of nvidia-smi nvlink -s: {_short(raw)}")
    read = [g.freeze() for g in gpus.values()]
    if not any(g.links or g.all_inactive for g in read):
        raise NvlinkStatusParseError(_why_refused(headers, link_lines, other_lines))
    if len(notes) > MAX_WARNINGS:  # a long foreign text: the first ones, then how many more
        notes[MAX_WARNINGS:] = [f"... and {counted(len(notes) - MAX_WARNINGS, 'more warning')}"]
    return NvlinkStatus(tuple(read), tuple(dict.fromkeys(notes)))


def _why_refused(headers: int, link_lines: int, other_lines: int) -> str:
    if not (headers or link_lines or other_lines):
        # What nvidia-smi nvlink -s prints where no GPU has NVLink (seen: an H200 on PCIe, driver
        # 580.159.04, exit status 0): nothing, so no GPU is named and no link state can be read.
        return (
            "empty: nvidia-smi nvlink -s prints nothing where no GPU has NVLink, and names no GPU "
            "then; there are no link states to read"
        )
    if headers and not link_lines:
        return (
            f"no link lines under the {headers} 'GPU <i>: <name>' headers: not nvidia-smi nvlink -s output "
            f"(nvidia-smi -L, -q or another nvlink subcommand?)"
        )
    if headers:
        return (
            "no readable 'Link <n>: <speed> GB/s' or '<inactive>' line under a GPU header: not "
            "nvidia-smi nvlink -s output (another nvlink subcommand?)"
        )
    if link_lines:
        return "link lines but no 'GPU <i>: <name> (UUID: ...)' header above them: not nvidia-smi nvlink -s output"
    return "no nvidia-smi nvlink -s output: no 'GPU <i>: <name> (UUID: ...)' header followed by 'Link <n>: ...' lines"
