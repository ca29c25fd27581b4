"""NCCL's ``NCCL_TOPO_DUMP_FILE`` XML: the topology NCCL itself detected (GPUs, NVLinks, NICs, PCI
switches), read strictly: text that is not such XML is a ``NcclTopoXmlError`` with a one-line reason,
naming the tool that wrote it where it is another's (``parse.which_tool``).

What the elements mean is NCCL's (src/graph/xml.cc, ncclTopoGetXmlFromGpu, and topo.cc,
ncclTopoAddNvLinks): an ``<nvlink>``'s ``count`` is how many NVLinks reach its ``target`` (a bus id),
and its ``tclass`` (the target's PCI class) says what is there, by NCCL's prefix table
``kvDictPciClass``: ``0x03...`` a GPU, ``0x068001`` the CPU, anything else an NVSwitch (NCCL writes
``0x068000``, and ``fffffff:ffff:ff`` for a target NVML could not see, assumed an NVSwitch)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from .which_tool import refusal


class NcclTopoXmlError(ValueError):
    """The text is not an NCCL topology XML; the message is a one-line reason."""


TOOL = "NCCL's topology dump (NCCL_TOPO_DUMP_FILE)"
_HEX = re.compile(r"[0-9a-fA-F]{1,16}")
HIDDEN_TARGET = "fffffff:ffff:ff"  # NCCL's bus id for an NVLink peer NVML could not see (xml.cc)


def nvlink_peer(tclass: str | None) -> str | None:
    """What NCCL takes an NVLink's target to be, by its ``tclass``: "gpu", "cpu" or "nvswitch";
    None without one (NCCL refuses such a link: xmlGetAttrStr)."""
    if tclass is None:
        return None
    if tclass.startswith("0x03"):
        return "gpu"
    return "cpu" if tclass.startswith("0x068001") else "nvswitch"


def _bus(busid: object) -> int | None:
    """A bus id as NCCL compares them (busIdToInt64: its hex digits, ``:`` and ``.`` left out)."""
    digits = str(busid or "").replace(":", "").replace(".", "")
    return int(digits, 16) if _HEX.fullmatch(digits) else None


def _num(attrs: dict[str, str], key: str, where: str, warnings: list[str]) -> int | str | None:
    """The attribute as an int; absent or empty (NCCL writes ``link_width=""`` where sysfs had no
    value) -> None; unreadable -> the raw string and a warning."""
    raw = attrs.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        warnings.append(f"{where}: {key}={raw!r} is not a number")
        return raw


def parse_topo_xml(text: object) -> dict[str, Any]:
    """``NCCL_TOPO_DUMP_FILE`` XML -> cpus, gpus (with their NVLinks), nics.
    Every element's attributes are kept; numbers become ints, ``gdr`` a bool. A GPU or NIC takes the
    busid of the ``<pci>`` it sits in and the numaid of its ``<cpu>``."""
    root = _system_element(text)
    out: dict[str, Any] = {"version": root.get("version"), "cpus": [], "gpus": [], "nics": [], "warnings": []}
    warnings: list[str] = out["warnings"]
    if root.get("version") != "1":
        warnings.append(f"<system version={root.get('version')!r}>: NCCL writes version 1")
    try:
        _walk(root, None, None, out, warnings)
    except RecursionError:  # NCCL nests a few levels; thousands are not a topology
        raise NcclTopoXmlError("elements nested too deeply to be an NCCL topology") from None
    _name_gpu_peers(out["gpus"])
    if not out["gpus"]:
        warnings.append("no <gpu> element: a topology without GPUs (a hand-written NCCL_TOPO_FILE?)")
    return out


def _system_element(text: object) -> ET.Element:
    """The ``<system>`` root of ``text``, or an ``NcclTopoXmlError`` saying why the text is no NCCL
    topology (another tool's, not XML, a DOCTYPE, another root)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str) or not text.strip():
        raise NcclTopoXmlError(f"empty text: no <system> element of {TOOL}")
    if why := refusal(text, "nccl-topo"):
        raise NcclTopoXmlError(why)
    if "<!DOCTYPE" in text:  # NCCL writes none; an internal one could declare entities that expand
        raise NcclTopoXmlError(f"a <!DOCTYPE> (NCCL writes none, and its entities are not read): not {TOOL}")
    try:
        root = ET.fromstring(text.strip().lstrip("\ufeff"))
    except ET.ParseError as exc:
        raise NcclTopoXmlError(f"not well-formed XML: {exc}: not {TOOL}") from None
    if root.tag != "system":
        raise NcclTopoXmlError(f"root element is <{root.tag[:40]}>, expected <system>: not {TOOL}")
    return root


def _walk(
    node: ET.Element, numaid: int | str | None, pci: dict[str, str] | None, out: dict[str, Any], warnings: list[str]
) -> None:
    """Each ``<cpu>``, ``<gpu>`` and ``<net>`` under ``node`` into ``out``, in document order; a GPU or
    NIC with the numaid of the ``<cpu>`` and the attributes of the ``<pci>`` it sits in."""
    for child in node:
        attrs = dict(child.attrib)
        if child.tag == "cpu":
            cpu = dict(attrs, numaid=_num(attrs, "numaid", "<cpu>", warnings))
            out["cpus"].append(cpu)
            _walk(child, cpu["numaid"], None, out, warnings)
        elif child.tag == "pci":
            _walk(child, numaid, attrs, out, warnings)
        elif child.tag == "gpu":
            out["gpus"].append(_gpu(child, attrs, numaid, pci, warnings))
        elif child.tag == "nic":
            for net in child.iter("net"):
                out["nics"].append(_nic(dict(net.attrib), numaid, pci, warnings))
        else:
            _walk(child, numaid, pci, out, warnings)


def _gpu(
    node: ET.Element,
    attrs: dict[str, str],
    numaid: int | str | None,
    pci: dict[str, str] | None,
    warnings: list[str],
) -> dict[str, Any]:
    """A ``<gpu>`` with its NVLinks and C2C links; ``peer_dev`` is filled once every GPU is read."""
    where = f"<gpu dev={attrs.get('dev')!r}>"
    for key in ("dev", "sm", "rank"):
        if key not in attrs:
            warnings.append(f"{where}: no {key} attribute")
    pci = pci or {}
    entry: dict[str, Any] = dict(
        attrs,
        busid=pci.get("busid"),
        numaid=numaid,
        link_speed=pci.get("link_speed"),
        link_width=_num(pci, "link_width", where, warnings),
        dev=_num(attrs, "dev", where, warnings),
        sm=_num(attrs, "sm", where, warnings),
        rank=_num(attrs, "rank", where, warnings),
        gdr=attrs.get("gdr") == "1",
        nvlinks=[],
        c2c=[],
    )
    for link in node.iter("nvlink"):
        la = dict(link.attrib)
        peer = nvlink_peer(la.get("tclass"))
        entry["nvlinks"].append(
            {
                "target": la.get("target"),
                "count": _num(la, "count", where, warnings),
                "tclass": la.get("tclass"),
                "nvswitch": peer == "nvswitch",
                "peer": peer,
                "peer_dev": None,  # the GPU at the target, where the file has it (_name_gpu_peers)
            }
        )
    for link in node.iter("c2c"):
        la = dict(link.attrib)
        entry["c2c"].append({"bw": la.get("bw"), "count": _num(la, "count", where, warnings)})
    return entry


def _nic(
    attrs: dict[str, str], numaid: int | str | None, pci: dict[str, str] | None, warnings: list[str]
) -> dict[str, Any]:
    where = f"<net name={attrs.get('name')!r}>"
    if "name" not in attrs:
        warnings.append(f"{where}: no name attribute")
    return dict(
        attrs,
        busid=(pci or {}).get("busid"),
        numaid=numaid,
        dev=_num(attrs, "dev", where, warnings),
        speed=_num(attrs, "speed", where, warnings),
        port=_num(attrs, "port", where, warnings),
        maxconn=_num(attrs, "maxconn", where, warnings),
        gdr=attrs.get("gdr") == "1",
    )


def _name_gpu_peers(gpus: list[dict[str, Any]]) -> None:
    """Each NVLink to a GPU gets that GPU's ``dev`` (``peer_dev``), matched by bus id as NCCL does."""
    devs = {_bus(g["busid"]): g["dev"] for g in gpus if _bus(g["busid"]) is not None}
    for link in (link for g in gpus for link in g["nvlinks"] if link["peer"] == "gpu"):
        link["peer_dev"] = devs.get(_bus(link["target"]))
