"""The NIC Legend under ``nvidia-smi topo -m``'s matrix ("NIC0: mlx5_0"): which device each NIC
column is."""

from __future__ import annotations

import re

_NIC_ENTRY_RE = re.compile(r"(NIC[0-9]+)\s*:\s*(\S+?)(?=\s|NIC[0-9]+\s*:|$)")


def nic_legend(lines: list[str], nics: list[str], warnings: list[str]) -> dict[str, str]:
    """NIC label -> device name from the NIC Legend. Past about 40 NICs nvidia-smi's legend is
    corrupted (entries run together, a label given twice): an entry that contradicts another, or
    names a NIC the matrix does not have, is dropped with a warning; the NIC keeps its label."""
    entries: dict[str, list[str]] = {}
    for line in lines:
        for m in _NIC_ENTRY_RE.finditer(line):
            entries.setdefault(m.group(1), []).append(m.group(2))
    owners: dict[str, list[str]] = {}
    for label, names in entries.items():
        owners.setdefault(names[0], []).append(label)
    legend = {}
    for label, names in entries.items():
        if len(set(names)) > 1:
            warnings.append(f"NIC Legend names {label} {' and '.join(sorted(set(names)))}; its name is unknown")
        elif len(owners[names[0]]) > 1:
            warnings.append(f"NIC Legend gives {names[0]} to {', '.join(owners[names[0]])}; their names are unknown")
        elif label not in nics:
            warnings.append(f"NIC Legend names {label}, which the matrix does not have")
        else:
            legend[label] = names[0]
    return legend
