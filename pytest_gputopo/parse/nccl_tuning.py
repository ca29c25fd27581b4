"""NCCL's TUNING lines: which algorithm and protocol an all-reduce of a given size took."""

from __future__ import annotations

import re
from collections.abc import Iterable

# One line per collective on rank 0 (src/enqueue.cc), in three forms: NCCL 2.20-2.22
# ``67108864 Bytes -> Algo 4 proto 2 time 1234.5`` (no collective, numbers), 2.23
# ``AllReduce: 67108864 Bytes -> Algo 4 proto 2 time ...``, 2.24 on
# ``AllReduce: 67108864 Bytes -> Algo NVLS proto SIMPLE channel{Lo..Hi}={0..15}``. Before 2.20 the line
# was commented out: the algorithm is then unknown.
_TUNING_RE = re.compile(r"(?:\b([A-Za-z]+): |\bINFO )(\d+) Bytes -> Algo (\w+) proto (\w+)")
# The numbers of the 2.20-2.23 lines: NCCL_ALGO_* and NCCL_PROTO_* of src/include/nccl_common.h, named
# as ncclAlgoToString / ncclProtoToString (src/collectives.cc) name them in the later lines.
_ALGO_NAMES = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
_PROTO_NAMES = ("LL", "LL128", "SIMPLE")


def _named(token: str, names: tuple[str, ...]) -> str:
    return names[int(token)] if token.isdigit() and int(token) < len(names) else token


def parse_nccl_tuning(text: str) -> list[tuple[str | None, int, str, str]]:
    """``(collective, bytes, algo, proto)`` for every NCCL_DEBUG_SUBSYS=TUNING dispatch line, e.g.
    ``NCCL INFO AllReduce: 67108864 Bytes -> Algo NVLS proto Simple channel{Lo..Hi}={0..15}``;
    ``collective`` is None where the line does not name it (NCCL 2.20-2.22), numbers are named."""
    return [
        (m.group(1), int(m.group(2)), _named(m.group(3), _ALGO_NAMES), _named(m.group(4), _PROTO_NAMES))
        for m in _TUNING_RE.finditer(text)
    ]


def algo_by_size(lines: Iterable[tuple[str | None, int, str, str]]) -> dict[int, str]:
    # A line without the collective's name is an all-reduce too: the workers run nothing else
    # (torch's NCCL barrier is an all-reduce of one element, ProcessGroupNCCL::barrier).
    counts: dict[int, dict[str, int]] = {}
    for coll, nbytes, algo, _proto in lines:
        if coll in ("AllReduce", None):
            per = counts.setdefault(nbytes, {})
            per[algo] = per.get(algo, 0) + 1
    return {n: max(per, key=lambda a: per[a]) for n, per in counts.items()}
