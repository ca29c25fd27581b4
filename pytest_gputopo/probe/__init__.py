"""Learn the machine once: an ordered chain of sources, then the CUDA view of it.

Sources: a machine the user named (a recorded profile or ``nvidia-smi topo -m`` text, read straight
into the model, no ``pynvml`` needed), else this host: NVML through ``nvidia-ml-py``, then, only where a
question needs them, CUDA's view (libcuda) and torch's versions, each in a child process and kept
for the rest of the boot. The result is restricted and renumbered to the GPUs this process sees as
``cuda:0..n-1``. Backends are imported lazily: loading the plugin must not import ``pynvml`` or
``torch``.

This module is the probe's public face (``probe``, ``learn``, ``reference``, ``probe_recorded``);
each source lives in its own: ``named_machine`` (a recorded profile, ``nvidia-smi`` text),
``this_host`` (NVML's child, CUDA's view and torch's versions, this boot's record), and
``cuda_numbering`` (the renumbering every source's machine goes through).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..core import model

if TYPE_CHECKING:  # annotations only: the public face loads its parts when first used
    from .learned import BootRecord, Learned

__all__ = ["BootRecord", "Learned", "MachineError", "learn", "probe", "probe_recorded", "reference"]


def __getattr__(name: str):
    """The rest of the public face, imported when first used: the probe's child (``host``) imports this
    package, and must not pay for the readers of named machines nor CUDA's numbering."""
    if name in ("BootRecord", "Learned", "MachineError"):
        # Through sys.modules, as ``named_machine``'s own import: the package's attribute may be a module
        # an in-process pytest run (pytester) dropped from sys.modules, whose MachineError is another class.
        return getattr(importlib.import_module(f"{__name__}.learned"), name)
    if name == "probe_recorded":
        from .named_machine import probe_recorded

        return probe_recorded
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def probe(
    machine: str | None = None, *, needs=model.ALL_FACTS, boot_record: BootRecord | None = None
) -> model.Topology:
    """The topology as this process sees it. ``machine``: a bundled name, a profile (.json) or
    ``nvidia-smi topo -m`` text file; None probes this host, learning only the facts ``needs`` names
    (``model.NVML``, ``CUDA``, ``TORCH``: the others stay unknown)."""
    return learn(machine, needs=needs, boot_record=boot_record).topology


def learn(
    machine: str | None = None,
    *,
    needs=model.ALL_FACTS,
    boot_record: BootRecord | None = None,
    fresh: frozenset = frozenset(),
) -> Learned:
    """``probe``, with what was probed and what was taken from this boot's record; ``fresh``: the facts
    asked anew even where this boot's record has them (a health check asks CUDA: ``model.CUDA``)."""
    if machine is None:
        from .this_host import learn_this_host

        return learn_this_host(frozenset(needs), boot_record, frozenset(fresh))
    from .cuda_numbering import as_cuda_sees_it
    from .learned import Learned
    from .named_machine import from_smi_file, is_text, probe_recorded

    if is_text(machine):
        return Learned(as_cuda_sees_it(from_smi_file(machine), None))
    return Learned(as_cuda_sees_it(probe_recorded(machine), None))


def reference(name_or_path: str) -> model.Topology:
    """A reference machine for ``--gputopo-expect`` (a bundled name, a profile, or ``nvidia-smi``
    text), whole and in nvidia-smi's numbering: CUDA_VISIBLE_DEVICES applies to the job, not to it."""
    from .named_machine import from_smi_file, is_text, probe_recorded

    if is_text(name_or_path):
        return from_smi_file(name_or_path)
    return probe_recorded(name_or_path)
