"""The gputopo markers: each one's signature and help (registered at start-up), and the requirement
it states. The requirement classes (``core.requirements``) validate their own arguments; a marker
only binds its arguments to its signature and names the class.

Registering the markers costs no more than these plain functions: ``core.requirements`` is imported
when the first marked test is collected, not when the plugin loads.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any


def _requires_gpus(
    n=1,
    *,
    min_memory_gb=None,
    compute_capability=None,
    arch=None,
    model=None,
    bf16=None,
    multicast=None,
    healthy=None,
    strict=None,
):
    from ..core.gpu_requirements import GpuRequirement

    return GpuRequirement(
        gpus=n,
        min_memory_gb=min_memory_gb,
        compute_capability=compute_capability,
        arch=arch,
        model=model,
        bf16=bf16,
        multicast=multicast,
        healthy=healthy,
    )


def _requires_versions(*, driver=None, cuda=None, cuda_runtime=None, nccl=None, strict=None):
    from ..core.gpu_requirements import VersionRequirement

    return VersionRequirement(driver=driver, cuda=cuda, cuda_runtime=cuda_runtime, nccl=nccl)


def _requires_p2p(gpus=None, *, strict=None):
    return _reqs().P2PRequirement(gpus=gpus)


def _requires_nvlink(gpus=None, min_links=1, *, strict=None):
    return _reqs().NvLinkRequirement(gpus=gpus, min_links=min_links)


def _requires_link(cls, gpus=None, *, strict=None):
    return _reqs().LinkRequirement(gpus=gpus, need=cls)


def _min_allreduce_bw(gbps=None, gpus=None, size=None, *, floor=None, strict=None):
    return _fact_reqs().BandwidthRequirement(gpus=gpus, metric="allreduce", gbps=gbps, size=size, floor=floor)


def _min_p2p_bw(gbps=None, gpus=None, *, floor=None, strict=None):
    return _fact_reqs().BandwidthRequirement(gpus=gpus, metric="p2p", gbps=gbps, floor=floor)


def _min_h2d_bw(gbps=None, pinned=True, *, floor=None, strict=None):
    return _fact_reqs().BandwidthRequirement(metric="h2d", gbps=gbps, pinned=pinned, floor=floor)


def _requires_nccl_transport(kind, gpus=None, *, gdrdma=None, strict=None):
    return _fact_reqs().TransportRequirement(gpus=gpus, kind=kind, gdrdma=gdrdma)


def _ranks(n, *, timeout=None, backend=None, pool=None, strict=None):
    return _ranks_req().RanksRequirement(n=n, timeout=timeout, backend=backend, pool=pool)


def _reqs():
    from ..core import requirements  # the core, on the first marked test (see the module's docstring)

    return requirements


def _fact_reqs():
    from ..core import fact_requirements  # (as _reqs) those judged on figures and NCCL's account

    return fact_requirements


def _ranks_req():
    from ..core import ranks_requirement  # (as _reqs) a test run as n ranks

    return ranks_requirement


MARKERS: dict[str, Callable] = {
    "requires_gpus": _requires_gpus,
    "requires_versions": _requires_versions,
    "requires_p2p": _requires_p2p,
    "requires_nvlink": _requires_nvlink,
    "requires_link": _requires_link,
    "min_allreduce_bw": _min_allreduce_bw,
    "min_p2p_bw": _min_p2p_bw,
    "min_h2d_bw": _min_h2d_bw,
    "requires_nccl_transport": _requires_nccl_transport,
    "ranks": _ranks,
}

MARKER_HELP = {
    "requires_gpus": "n GPUs are visible (n: a number, or a list of GPU indices such as [0, 5]) and each of "
    "cuda:0..n-1 (or of those listed) meets every condition given: min_memory_gb (1e9 bytes), "
    "compute_capability ('>=9.0'), arch ('hopper', '>=ampere', '<blackwell', '!=hopper', a list: "
    "any), model (a substring of the name, or a list: any), bf16 (native), multicast (NVLS), "
    "healthy (no health fault at rest: docs/health.md)",
    "requires_versions": "each version given is met, as a specifier ('>=2.18'): driver (NVIDIA driver), cuda "
    "(CUDA the driver supports), cuda_runtime (CUDA torch was built with), "
    "nccl (NCCL torch loads)",
    "requires_p2p": "every pair among the GPUs the test uses (cuda:0..gpus-1, or gpus=[0, 5], default all) can do "
    "P2P read and write",
    "requires_nvlink": "every such pair is connected by at least min_links NVLinks",
    "requires_link": "every such pair is linked at cls or better: NV# > PIX > PXB > PHB > NODE > SYS "
    "('NV' = any NVLink)",
    "min_allreduce_bw": "all-reduce bus bandwidth among the GPUs the test uses, at one large size, is at least "
    "gbps GB/s (None: floor x what the links should give)",
    "min_p2p_bw": "P2P copy bandwidth of every such pair is at least gbps GB/s (None: floor x the link's)",
    "min_h2d_bw": "host-to-device copy bandwidth of every visible GPU is at least gbps GB/s",
    "requires_nccl_transport": "NCCL takes transport kind (P2P, SHM, NET/IB, NET/Socket, NVLS, COLLNET) between "
    "the GPUs the test uses; gdrdma=True/False for GPUDirect RDMA",
    "ranks": "run the test as n ranks spawned by torch.multiprocessing (n: a number, or a list of world sizes "
    "such as [2, 4]: one test each, ids ranks2, ranks4), each with its process group initialised "
    "(backend: 'nccl', one GPU per rank; 'gloo', on the CPUs; None: NCCL where the machine has a GPU, "
    "else gloo) and the fixture gputopo_rank; timeout: seconds for all ranks (default 300), past it "
    "every rank's stack is reported and the test fails; pool=True: a warm pool of ranks kept between "
    "such tests (None: --gputopo-ranks-pool)",
}


# Not a requirement (nothing is judged): what a leased test says of itself (plugin/leases.py).
LEASE_MEMORY = "lease_memory"
LEASE_MEMORY_LINE = (
    f"{LEASE_MEMORY}(gib): under --gputopo-lease, this test uses at most gib GiB (2^30 bytes) of each GPU it "
    "holds, and its lease shares the GPUs while the budgets fit their memory (None: whole GPUs); "
    "overrides --gputopo-lease-memory"
)


@functools.cache
def registration_lines() -> tuple[str, ...]:
    """The ``markers`` ini lines that register the gputopo markers, with their full signatures."""
    return (
        *(
            f"{marker_signature(name).replace('*, ', '').replace('strict=None', 'strict=False')}: {text}; "
            f"unmet -> skip (fail when strict)"
            for name, text in MARKER_HELP.items()
        ),
        LEASE_MEMORY_LINE,
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


def marker_signature(name: str) -> str:
    sig = str(inspect.signature(MARKERS[name]))
    return f"{name}{sig}"


def from_marker(name: str, args: tuple, kwargs: dict) -> tuple:
    """The requirement a marker states, and its ``strict=`` argument (None when not given); a bad
    argument is a ``core.requirements.RequirementError``."""
    factory = MARKERS[name]
    error = _reqs().RequirementError
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
            if isinstance(requirement, _ranks_req().RanksRequirement):
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
                _reqs().RequirementError(
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
            if not isinstance(exc, _reqs().RequirementError):
                raise
            result = exc
        if key is not None:
            parsed[key] = result
    return result
