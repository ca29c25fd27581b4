"""The NVIDIA GPUs on this host's PCI bus, as the kernel lists them (sysfs), for the check's ``pci``
item: a GPU that fell off the bus, or that the driver could not start, is on the bus and bound to
the ``nvidia`` driver, and NVML does not list it (NVSentinel compares the same counts).

Only the GPUs this process may use are counted: a container is given some of the host's GPUs, and
sysfs shows it all of them; the others' device nodes (``/dev/nvidia<minor>``, the minor from the
driver's ``/proc/driver/nvidia/gpus/<bus id>/information``) are not in its ``/dev``. A GPU bound to
another driver (``vfio-pci``: passed to a virtual machine) or to none is not NVML's to list. Only
small files of the kernel's are read (``files.read_text``'s cap); None where sysfs cannot be read.
"""

from __future__ import annotations

import os
import re

NVIDIA = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # PCI class: VGA-compatible and 3D controllers (an NVSwitch is a bridge)
_MINOR = re.compile(r"^Device Minor:\s*(\d{1,6})\s*$", re.M)


def nvidia_gpus(
    sysfs: str = "/sys/bus/pci/devices", proc: str = "/proc/driver/nvidia/gpus", dev: str = "/dev"
) -> tuple[str, ...] | None:
    """The bus ids (NVML's form, ``00000000:3B:00.0``) of the NVIDIA GPUs on the bus, bound to the
    nvidia driver, whose device node is in ``dev``; None where the bus cannot be listed."""
    try:
        names = sorted(os.listdir(sysfs))
    except OSError:
        return None
    found = []
    for name in names:
        here = os.path.join(sysfs, name)
        if _small(os.path.join(here, "vendor")) != NVIDIA or not (_small(os.path.join(here, "class")) or "").startswith(
            GPU_CLASSES
        ):
            continue
        if os.path.basename(os.path.realpath(os.path.join(here, "driver"))) != "nvidia":
            continue
        minor = _MINOR.search(_small(os.path.join(proc, name, "information")) or "")
        if minor and os.path.exists(os.path.join(dev, f"nvidia{minor.group(1)}")):
            found.append(nvml_bus_id(name))
    return tuple(found)


def nvml_bus_id(sysfs_name: str) -> str:
    """``0000:3b:00.0`` as NVML writes it: ``00000000:3B:00.0``."""
    domain, _, rest = sysfs_name.partition(":")
    return f"{domain.zfill(8)}:{rest}".upper()


def _small(path: str) -> str | None:
    """A one-line sysfs or procfs file, stripped; None where it cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(4096).strip()
    except OSError:
        return None
