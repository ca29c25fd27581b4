"""NCCL's ``NCCL_TOPO_DUMP_FILE`` XML: the topology NCCL itself detected (GPUs, NVLinks, NICs, PCI
switches), read strictly: text that is not such XML is a ``NcclTopoXmlError`` with a one-line reason."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any


class NcclTopoXmlError(ValueError):
    """The text is not an NCCL topology XML; the message is a one-line reason."""


_NVSWITCH_CLASS = "0x068000"


def _num(attrs: dict[str, str], key: str, where: str, warnings: list[str]) -> int | str | None:
    """The attribute as an int; absent -> None; unreadable -> the raw string and a warning."""
    raw = attrs.get(key)
    if raw is None:
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
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str) or not text.strip():
        raise NcclTopoXmlError("empty text: no <system> element")
    try:
        root = ET.fromstring(text.strip().lstrip("\ufeff"))
    except ET.ParseError as exc:
        raise NcclTopoXmlError(f"not well-formed XML: {exc}") from None
    if root.tag != "system":
        raise NcclTopoXmlError(f"root element is <{root.tag}>, expected <system>")
    out: dict[str, Any] = {"version": root.get("version"), "cpus": [], "gpus": [], "nics": [], "warnings": []}
    warnings: list[str] = out["warnings"]
    if root.get("version") != "1":
        warnings.append(f"<system version={root.get('version')!r}>: NCCL writes version 1")

    def walk(node: ET.Element, numaid: int | str | None, pci: dict[str, str] | None) -> None:
        for child in node:
            attrs = dict(child.attrib)
            if child.tag == "cpu":
                cpu = dict(attrs, numaid=_num(attrs, "numaid", "<cpu>", warnings))
                out["cpus"].append(cpu)
                walk(child, cpu["numaid"], None)
            elif child.tag == "pci":
                walk(child, numaid, attrs)
            elif child.tag == "gpu":
                out["gpus"].append(gpu(child, attrs, numaid, pci))
            elif child.tag == "nic":
                for net in child.iter("net"):
                    out["nics"].append(nic(dict(net.attrib), numaid, pci))
            else:
                walk(child, numaid, pci)

    def gpu(
        node: ET.Element, attrs: dict[str, str], numaid: int | str | None, pci: dict[str, str] | None
    ) -> dict[str, Any]:
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
            entry["nvlinks"].append(
                {
                    "target": la.get("target"),
                    "count": _num(la, "count", where, warnings),
                    "tclass": la.get("tclass"),
                    "nvswitch": la.get("tclass") == _NVSWITCH_CLASS,
                }
            )
        for link in node.iter("c2c"):
            la = dict(link.attrib)
            entry["c2c"].append({"bw": la.get("bw"), "count": _num(la, "count", where, warnings)})
        return entry

    def nic(attrs: dict[str, str], numaid: int | str | None, pci: dict[str, str] | None) -> dict[str, Any]:
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

    try:
        walk(root, None, None)
    except RecursionError:  # NCCL nests a few levels; thousands are not a topology
        raise NcclTopoXmlError("elements nested too deeply to be an NCCL topology") from None
    if not out["gpus"]:
        warnings.append("no <gpu> element: a topology without GPUs (a hand-written NCCL_TOPO_FILE?)")
    return out
