"""cuda-samples' ``p2pBandwidthLatencyTest``: its bandwidth and latency matrices, by their titles as
printed. Units as printed: GB/s (1e9 B/s) and µs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .cells import INT_RE, BadCell, cell_float
from .which_tool import refusal

__all__ = ["P2PParseError", "P2PBandwidthLatency", "parse_p2p_bandwidth_latency"]


class P2PParseError(ValueError):
    """The text holds no p2pBandwidthLatencyTest matrix."""


@dataclass(frozen=True)
class P2PBandwidthLatency:
    """The matrices of a p2pBandwidthLatencyTest run, keyed by their title as printed (e.g.
    ``"Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)"``; a latency matrix's CPU half gets
    ``" [CPU]"`` appended). ``matrix[i][j]``: from GPU i (row) to GPU j (column); None = not printed."""

    matrices: Mapping[str, tuple[tuple[float | None, ...], ...]]
    warnings: tuple[str, ...] = ()
    # (index, name, PCI address "0000000D:BB:DD") of each "Device: ..." line the test printed
    devices: tuple[tuple[int, str, str], ...] = ()

    @property
    def n_gpus(self) -> int:
        return max((len(m) for m in self.matrices.values()), default=0)

    def _cells(self, title: str, diagonal: bool) -> list[float]:
        m = self.matrices[title]
        return [v for i, row in enumerate(m) for j, v in enumerate(row) if v is not None and (i == j) == diagonal]

    def offdiag_max(self, title: str) -> float | None:
        return max(self._cells(title, False), default=None)

    def offdiag_min(self, title: str) -> float | None:
        return min(self._cells(title, False), default=None)

    def diag_max(self, title: str) -> float | None:
        return max(self._cells(title, True), default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "n_gpus": self.n_gpus,
            "devices": [{"index": i, "name": n, "bus_id": b} for i, n, b in self.devices],
            "matrices": {k: [list(r) for r in m] for k, m in self.matrices.items()},
            "warnings": list(self.warnings),
        }


_P2P_HEAD = {"D\\D": "", "GPU": "", "CPU": " [CPU]"}
# printf("Device: %d, %s, pciBusID: %x, pciDeviceID: %x, pciDomainID:%x\n", ...) in its main()
_DEVICE_RE = re.compile(
    r"Device: (\d{1,4}), (.{0,200}), pciBusID: ([0-9a-fA-F]{1,2}), "
    r"pciDeviceID: ([0-9a-fA-F]{1,2}), pciDomainID:([0-9a-fA-F]{1,8})"
)


def parse_p2p_bandwidth_latency(text: str) -> P2PBandwidthLatency:
    """The matrices of ``p2pBandwidthLatencyTest`` output: a title line, a head row (``D\\D``, or
    ``GPU``/``CPU`` for latency) numbering the GPUs, then one row per GPU. Cut rows keep what they
    have; raises ``P2PParseError`` when there is no matrix at all."""
    if not isinstance(text, str):
        raise P2PParseError(f"expected the text of a p2pBandwidthLatencyTest run, got {type(text).__name__}")
    if why := refusal(text, "p2p-bandwidth"):
        raise P2PParseError(why)
    matrices: dict[str, list[list[float | None]]] = {}
    notes: list[str] = []
    title: str | None = None
    key: str | None = None
    width = 0
    devices: dict[int, tuple[str, str]] = {}
    for raw in text.splitlines():
        tokens = raw.split()
        if not tokens:
            continue
        device = _DEVICE_RE.fullmatch(raw.strip())
        if device:
            index, name, bus, dev, domain = device.groups()
            devices.setdefault(int(index), (name, f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(dev, 16):02X}"))
            continue
        if tokens[0] in _P2P_HEAD and all(INT_RE.fullmatch(t) for t in tokens[1:]) and len(tokens) > 1:
            key = (title or "untitled matrix") + _P2P_HEAD[tokens[0]]
            width = len(tokens) - 1
            if key in matrices:
                notes.append(f"{key!r} appears twice; the last one is kept")
            matrices[key] = []
            continue
        if key is not None and INT_RE.fullmatch(tokens[0]):
            values: list[float | None] = []
            try:
                for tok in tokens[1 : 1 + width]:
                    values.append(cell_float(tok, notes))
            except BadCell:
                pass
            if len(values) < width:
                notes.append(f"{key!r}: row {tokens[0]} has {len(values)} of {width} values")
                values += [None] * (width - len(values))
            matrices[key].append(values)
            continue
        key = None
        if "Matrix" in raw:
            title = " ".join(tokens)
    if not any(matrices.values()):
        raise P2PParseError("no p2pBandwidthLatencyTest matrix (a 'D\\D' head row and GPU rows) in the text")
    return P2PBandwidthLatency(
        {k: tuple(tuple(r) for r in v) for k, v in matrices.items() if v},
        tuple(dict.fromkeys(notes)),
        tuple((i, n, b) for i, (n, b) in sorted(devices.items())),
    )
