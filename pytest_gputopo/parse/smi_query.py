"""Read ``nvidia-smi --query-gpu=<fields> --format=csv`` (``nvidia-smi --help-query-gpu`` names the
fields; ``,nounits`` drops the units from the values).

The first line is the header: the fields in the order asked, each by its canonical name whatever alias
was asked (``gpu_uuid`` prints ``uuid``, ``gpu_bus_id`` ``pci.bus_id``), a unit in brackets after a
field that has one (``memory.total [MiB]``). Then one line per GPU, cells separated by ", ", a value
followed by its unit unless ``nounits`` (``81920 MiB``), ``[N/A]`` or ``[Not Supported]`` where the GPU
does not say. nvidia-smi's MiB is 2^20 bytes. Fields read: index, name, uuid, pci.bus_id, memory.total,
compute_cap, driver_version, pcie.link.gen.current/.max, pcie.link.width.current/.max, mig.mode.current,
compute_mode; any other field is passed over. Text with ``noheader`` is refused: without the header,
which column is which is unknown. A row that cannot be read is a warning naming its line."""

from __future__ import annotations

import re
from typing import Any

from ..core.limits import MAX_GPUS, MAX_MEMORY_BYTES, MAX_PCIE_GEN, MAX_PCIE_WIDTH
from ..core.model import COMPUTE_MODES
from ..core.units import counted
from .smi_gpus import SmiGpu, SmiGpus, bus_key
from .which_tool import refusal

TOOL = "nvidia-smi --query-gpu"


class SmiQueryParseError(ValueError):
    """Text that is not nvidia-smi --query-gpu CSV output; the message says why."""


_FIELD_RE = re.compile(r"([a-z][a-z0-9_.]*)(?:\s*\[([^\]]{1,16})\])?")
_NOT_SAID = re.compile(
    r"\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions|GPU requires reset|"
    r"GPU is lost|Not Available)\]?",
    re.IGNORECASE,
)
_INT_RE = re.compile(r"[0-9]{1,12}")
_CC_RE = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")
_UUID_RE = re.compile(r"GPU-[0-9A-Fa-f-]{8,64}")
_VERSION_RE = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}")
# Aliases print their canonical name in the header; these are read under either.
_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id"}
_INTS = {
    "pcie.link.gen.current": ("pcie_gen_current", MAX_PCIE_GEN),
    "pcie.link.gen.max": ("pcie_gen_max", MAX_PCIE_GEN),
    "pcie.link.width.current": ("pcie_width_current", MAX_PCIE_WIDTH),
    "pcie.link.width.max": ("pcie_width_max", MAX_PCIE_WIDTH),
}
READ_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "compute_cap",
    "driver_version",
    *_INTS,
    "mig.mode.current",
    "compute_mode",
)


def _header(line: str) -> list[tuple[str, str | None]] | None:
    """(field, unit) per column, or None where the line is no --query-gpu header."""
    out = []
    for cell in line.split(","):
        m = _FIELD_RE.fullmatch(cell.strip())
        if not m:
            return None
        out.append((_ALIASES.get(m.group(1), m.group(1)), m.group(2)))
    return out


def _value(field: str, unit: str | None, raw: str, facts: dict[str, Any]) -> str | None:
    """Put the cell's fact in ``facts``; a note where the cell is not of its field's kind."""
    if _NOT_SAID.fullmatch(raw) or not raw:
        return None
    if field == "index":
        if not _INT_RE.fullmatch(raw) or int(raw) >= MAX_GPUS:
            return f"index {raw[:20]!r} is not a GPU index"
        facts["index"] = int(raw)
    elif field == "name":
        facts["name"] = raw
    elif field == "uuid":
        if not _UUID_RE.fullmatch(raw):
            return f"uuid {raw[:48]!r} is not a GPU UUID"
        facts["uuid"] = raw
    elif field == "pci.bus_id":
        if bus_key(raw) is None:
            return f"pci.bus_id {raw[:20]!r} is not a PCI bus id"
        facts["pci_bus_id"] = raw
    elif field == "memory.total":
        number, _, printed = raw.partition(" ")
        if (unit or printed or "MiB") != "MiB" or (printed and unit and printed != unit):
            return f"memory.total {raw[:20]!r} is not in MiB"
        if not _INT_RE.fullmatch(number) or not 0 < int(number) * 2**20 <= MAX_MEMORY_BYTES:
            return f"memory.total {raw[:20]!r} is not a number of MiB"
        facts["memory_total_bytes"] = int(number) * 2**20
    elif field == "compute_cap":
        if not _CC_RE.fullmatch(raw):
            return f"compute_cap {raw[:20]!r} is not <major>.<minor>"
        facts["compute_capability"] = raw
    elif field == "driver_version":
        if not _VERSION_RE.fullmatch(raw):
            return f"driver_version {raw[:20]!r} is not a version"
        facts["driver_version"] = raw
    elif field in _INTS:
        key, high = _INTS[field]
        if not _INT_RE.fullmatch(raw) or not 1 <= int(raw) <= high:
            return f"{field} {raw[:20]!r} is not from 1 to {high}"
        facts[key] = int(raw)
    elif field == "mig.mode.current":
        if raw not in ("Enabled", "Disabled"):
            return f"mig.mode.current {raw[:20]!r} is not Enabled or Disabled"
        facts["mig"] = raw == "Enabled"
    elif field == "compute_mode":
        if raw not in COMPUTE_MODES:
            return f"compute_mode {raw[:20]!r} is not one of {', '.join(COMPUTE_MODES)}"
        facts["compute_mode"] = raw
    return None


def parse_smi_query(text: str) -> SmiGpus:
    """The GPUs of ``nvidia-smi --query-gpu=... --format=csv`` output (see the module docstring).
    ``attached`` is the number of rows (nvidia-smi lists every GPU unless ``-i`` picked some), None
    where a row could not be read."""
    if not isinstance(text, str):
        raise SmiQueryParseError(f"expected the text of {TOOL}, got {type(text).__name__}")
    if why := refusal(text, "smi-query"):
        raise SmiQueryParseError(why)
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise SmiQueryParseError(f"empty text: no {TOOL} header")
    columns = _header(lines[0][1])
    if columns is None:
        raise SmiQueryParseError(
            f"line {lines[0][0]}: no {TOOL} header ('index, name, uuid, ...' naming the fields): printed with "
            f"--format=csv,noheader, or not {TOOL} output; run it with --format=csv (nounits may stay)"
        )
    fields = [f for f, _ in columns]
    if not set(fields) & set(READ_FIELDS):
        raise SmiQueryParseError(
            f"line {lines[0][0]}: the header names none of the fields gputopo reads ({', '.join(READ_FIELDS)})"
        )
    if len(set(fields)) != len(fields):
        raise SmiQueryParseError(f"line {lines[0][0]}: a field is named twice: which column gives it is unknown")
    notes: list[str] = []
    gpus: list[SmiGpu] = []
    drivers: list[str] = []
    indices: dict[int, int] = {}
    skipped = False  # a row not read: how many GPUs nvidia-smi listed is unknown
    for number, line in lines[1:]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(columns):
            notes.append(f"line {number}: {len(cells)} cells for {len(columns)} fields; not read")
            skipped = True
            continue
        facts: dict[str, Any] = {}
        bad = [
            why for (field, unit), raw in zip(columns, cells, strict=True) if (why := _value(field, unit, raw, facts))
        ]
        notes += [f"line {number}: {why}; not read" for why in bad]
        if facts.get("index") in indices:
            raise SmiQueryParseError(
                f"line {number}: GPU {facts['index']} is listed twice (line "
                f"{indices[facts['index']]}): not one {TOOL} output"
            )
        if "index" in facts:
            indices[facts["index"]] = number
        if (driver := facts.pop("driver_version", None)) is not None:
            drivers.append(driver)
        gpus.append(SmiGpu(**facts))
        if len(gpus) > MAX_GPUS:
            raise SmiQueryParseError(f"more than {MAX_GPUS} GPU rows: not one machine's {TOOL} output")
    if not gpus:
        raise SmiQueryParseError(f"a {TOOL} header and no GPU row under it")
    if len(set(drivers)) > 1:
        notes.append(
            f"the rows name {counted(len(set(drivers)), 'driver version')} "
            f"({', '.join(sorted(set(drivers)))}); the first is kept"
        )
    return SmiGpus(
        TOOL,
        tuple(gpus),
        attached=None if skipped else len(gpus),
        driver_version=drivers[0] if drivers else None,
        warnings=tuple(dict.fromkeys(notes)),
    )
