"""Reading the gputopo markers of the collected tests: each marker bound to its signature and built
into the requirement it states (``marker_table``: the markers as data), stacked markers restated,
``ranks([2, 4])``'s world sizes, and the names a project registered itself, left to it."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from .marker_table import (  # noqa: F401  (the table, read here; its names are the readers' too)
    LEASE_MEMORY,
    MARKER_HELP,
    MARKERS,
    marker_signature,
    ranks_requirement_core,
    registration_lines,
    requirements_core,
)


def registered_by_others(lines: list[str], ours: Sequence[str]) -> list[str]:
    """The gputopo marker names that a ``markers`` line other than ours registers (the project's ini
    file or conftest): those marks mean what the project says, and the plugin leaves them alone."""
    taken = set()
    for line in lines:
        name = line.split(":", 1)[0].split("(", 1)[0].strip()
        if name in MARKERS and line not in ours:
            taken.add(name)
    return sorted(taken)


def from_marker(name: str, args: tuple, kwargs: dict) -> tuple:
    """The requirement a marker states, and its ``strict=`` argument (None when not given); a bad
    argument is a ``core.requirements.RequirementError``."""
    factory = MARKERS[name]
    error = requirements_core().RequirementError
    try:
        inspect.signature(factory).bind(*args, **kwargs)
    except TypeError as exc:
        raise error(f"{exc}; signature: {marker_signature(name)}") from None
    strict = kwargs.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise error(f"strict must be True or False, got {strict!r}")
    return factory(*args, **kwargs), strict


def read_markers(items: list, leave: frozenset = frozenset()) -> tuple[list[tuple[Any, list]], list[str]]:
    """(item, [(requirement, strict), ...]) for each item that carries gputopo markers, and one error
    per bad marker naming the test. The same marker on many tests is read once. Marks named in
    ``leave`` (registered by the project itself) are not read.

    Stacked markers: for each marker name, the closest node that carries it restates what it says and
    keeps what it does not (a method's ``requires_gpus(4)`` in a class marked
    ``requires_gpus(min_memory_gb=80)`` is ``requires_gpus(4, min_memory_gb=80)``): the count is the
    method's, as ``get_closest_marker`` and DeepSpeed's ``world_size`` have it, and no condition is
    dropped for not being said again. Several marks of one name on that node each apply; markers of
    different names all apply."""
    parsed: dict[Any, Any]
    marked, errors, parsed = [], [], {}
    for item in items:
        # name -> (the closest node carrying it, its marks there, farther marks)
        by_name: dict[str, tuple[Any, list[Any], list[Any]]]
        found, by_name = [], {}
        for node, mark in item.iter_markers_with_node():  # one walk over the node chain, closest first
            if mark.name in MARKERS and mark.name not in leave:
                closest, here, farther = by_name.setdefault(mark.name, (node, [], []))
                (here if node is closest else farther).append(mark)
        for name, (_, here, farther) in by_name.items():
            for mark in here:
                args, kwargs, problem = _keeping(name, mark, farther)
                result = problem or _parsed(parsed, name, args, kwargs)
                if isinstance(result, ValueError):
                    errors.append(f"{item.nodeid}: @pytest.mark.{name}: {result}")
                else:
                    found.append(_of_size(item, *result))
        if found:
            marked.append((item, found))
    return marked, errors


WORLD_SIZE = "gputopo_world_size"  # the parameter that gives each test of ``ranks([2, 4])`` its size


def world_sizes(definition, leave: frozenset = frozenset()) -> tuple[int, ...] | None:
    """The world sizes a function's ``ranks([2, 4])`` lists (``pytest_generate_tests`` makes one test
    of each), None where it has no list; a bad mark is said at collection's end, not here."""
    if definition.get_closest_marker("ranks") is None or "ranks" in leave:
        return None
    marked, _ = read_markers([definition], leave)
    for _, found in marked:
        for requirement, _ in found:
            if isinstance(requirement, ranks_requirement_core().RanksRequirement):
                return requirement.sizes
    return None


def _of_size(item, requirement, strict):
    """A test of ``ranks([2, 4])`` states ``ranks(k)``, k its own world size (its ``WORLD_SIZE``
    parameter); one not given one (a mark added after parametrization) keeps the list, an error."""
    if getattr(requirement, "sizes", None):
        callspec = getattr(item, "callspec", None)
        size = callspec.params.get(WORLD_SIZE) if callspec is not None else None
        if size is not None:
            return requirement.of_size(size), strict
    return requirement, strict


def _keeping(name: str, mark, farther: list) -> tuple[tuple, dict, ValueError | None]:
    """``mark``'s arguments with every argument a farther mark of its name gives and it does not
    restate (closest first), and the error of a farther mark that cannot be read."""
    signature = inspect.signature(MARKERS[name])
    try:
        bound = signature.bind_partial(*mark.args, **mark.kwargs)
    except TypeError:
        return mark.args, mark.kwargs, None  # its own error is said when it is read
    for other in farther:
        try:
            theirs = signature.bind_partial(*other.args, **other.kwargs)
        except TypeError as exc:
            return (
                (),
                {},
                requirements_core().RequirementError(
                    f"(on an enclosing class or module) {exc}; signature: {marker_signature(name)}"
                ),
            )
        for arg, value in theirs.arguments.items():
            bound.arguments.setdefault(arg, value)
    return bound.args, bound.kwargs, None  # in the signature's order, whatever order they were added in


def _parsed(parsed: dict, name: str, args: tuple, kwargs: dict):
    """The requirement (and strict) the arguments state, or the RequirementError they raise: read once
    per distinct arguments."""
    try:
        key = (name, args, tuple(sorted(kwargs.items())))
        hash(key)
    except TypeError:  # unhashable arguments: read every time
        key = None
    result = parsed.get(key) if key is not None else None
    if result is None:
        try:
            result = from_marker(name, args, kwargs)
        except ValueError as exc:
            if not isinstance(exc, requirements_core().RequirementError):
                raise
            result = exc
        if key is not None:
            parsed[key] = result
    return result
