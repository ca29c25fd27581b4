"""What learning a machine gives (``Learned``), the error a machine the user named raises
(``MachineError``), and where this boot's slow answers are kept (``BootRecord``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..core import model


class MachineError(Exception):
    """The machine the user named cannot be used (unknown name, malformed file)."""


@dataclass(frozen=True)
class Learned:
    """A topology and, in words, where its host facts came from this time (the header says it)."""

    topology: model.Topology
    notes: tuple[str, ...] = ()


class BootRecord(Protocol):
    """Where CUDA's view and torch's versions are kept for the rest of this boot (pytest's cache, in a
    pytest run): what was put under a key comes back from ``get`` as it was stored, or None."""

    def get(self, key: str) -> dict | None: ...

    def put(self, key: str, value: dict) -> None: ...
