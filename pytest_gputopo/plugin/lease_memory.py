"""A leased test's memory budget: read from its ``lease_memory`` mark (checked, at collection), and
whether it fits beside a GPU's shares (``core.lease_policy.fits``, asked under the GPU's mutex)."""

from __future__ import annotations

import pytest

from ..core import lease_policy
from .markers import LEASE_MEMORY


def fits_beside(budget: float, budgets, memory_gib: float | None) -> bool:
    """Whether ``budget`` fits on a GPU of ``memory_gib`` beside shares of ``budgets``."""
    holding = [lease_policy.Holding(0.0, b) for b in budgets]
    look = lease_policy.Look(0.0, {0: holding}, {0: memory_gib}, (), lease_policy.CONTEXT_RESERVE_GIB)
    return lease_policy.fits(budget, 0, look)


def read_budgets(items: list) -> dict[str, float | None]:
    """Each test's own memory budget (``@pytest.mark.lease_memory(gib)``, the closest mark), by node
    id: a positive number of GiB up to 1024, or None (whole GPUs); anything else is a usage error
    naming the test."""
    budgets, errors = {}, []
    for item in items:
        mark = item.get_closest_marker(LEASE_MEMORY)
        if mark is None:
            continue
        args = [*mark.args, *mark.kwargs.values()]
        gib = args[0] if len(args) == 1 and set(mark.kwargs) <= {"gib"} else "?"
        if gib is None or (isinstance(gib, (int, float)) and not isinstance(gib, bool) and 0 < gib <= 1024):
            budgets[item.nodeid] = None if gib is None else float(gib)
        else:
            errors.append(
                f"{item.nodeid}: @pytest.mark.{LEASE_MEMORY}: give one number of GiB above 0 and at most "
                f"1024, or None (whole GPUs); got {mark.args or ''}{mark.kwargs or ''}"
            )
    if errors:
        raise pytest.UsageError("\n".join(errors))
    return budgets
