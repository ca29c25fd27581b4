"""What operators' own tools printed about a machine, as a profile records it (``gputopo record
--nvbandwidth / --p2p-bandwidth``): bandwidth figures as ``published`` entries
(origin ``recorded``, with the file and tool as their source, never presented as measured here).
``nvidia-smi nvlink -s`` link states join the machine in ``parse.text_machine``.

A figure is recorded only where the tool's own source says what it is, in gputopo's terms:

- nvbandwidth (v0.8 ``testcases_ce.cpp``, ``testcases_sm.cpp``, ``memcpy.cpp``), copy-engine testcases
  only, where the copy is issued as gputopo's is (torch's ``copy_`` runs on the source GPU's stream):
  ``device_to_device_memcpy_write_ce`` cell [row][column] is a copy row -> column issued by the row's
  GPU (``p2p``); ``device_to_device_bidirectional_memcpy_write_ce``'s ``_total`` matrix (v0.6 on) both
  ways at once, each issued by its source, the two figures summed (``p2p_bidir``);
  ``host_to_device_memcpy_ce`` / ``device_to_host_memcpy_ce`` one row, a column per GPU, pinned host
  memory (``cuMemHostAlloc``). Not recorded: reads (``PREFER_DST_CONTEXT``: the receiving GPU issues
  the copy and pulls; nvbandwidth runs ``..._read_ce`` before ``..._write_ce``), ``*_sm`` (a copy
  kernel, not the copy engine), and the bidirectional-with-host, all-to-one, local and latency ones.
- cuda-samples' ``p2pBandwidthLatencyTest``: ``P2P Writes`` cell [i][j] is a copy i -> j, ``P2P Reads``
  j -> i, both peer to peer only where its ``P2P Connectivity Matrix`` says 1 (elsewhere
  ``cudaMemcpyPeerAsync`` stages the copy through the host); ``P2P=Disabled`` unidirectional is
  the staged copy; ``Bidirectional P2P=Enabled`` counts both directions' bytes, as ``p2p_bidir`` does.

The tools number GPUs as CUDA does in their process, as the profile's ``index`` does: a tool that saw
another number of GPUs, or other PCI addresses, ran elsewhere (or under another CUDA_VISIBLE_DEVICES)
and is refused."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..core import model
from ..core.limits import is_bandwidth
from ..core.units import counted
from .cuda_samples import P2PBandwidthLatency
from .nvbandwidth import Nvbandwidth


class ToolOutputError(ValueError):
    """A tool's output cannot describe this profile's machine; the message says why."""


# nvbandwidth testcase -> (kind, where a cell's GPUs are: "row->col" or "col" (one GPU), the matrix's
# key suffix, what the figure is). Only copy-engine copies issued by the source (MemcpyOperation's
# default PREFER_SRC_CONTEXT; a host buffer has no context, so the GPU's), as gputopo's copy_ is.
_NVBANDWIDTH = {
    "device_to_device_memcpy_write_ce": ("p2p", "row->col", "", "copy engine, GPU(row) pushes to GPU(column)"),
    # VECTOR_BW: each stream timed on its own; _total sums them, both directions' bytes as p2p_bidir counts
    "device_to_device_bidirectional_memcpy_write_ce": (
        "p2p_bidir",
        "row->col",
        "_total",
        "Total: copy engine, each GPU pushes to the other at once, summed",
    ),
    "host_to_device_memcpy_ce": ("h2d", "col", "", "copy engine, pinned host memory to GPU(column)"),
    "device_to_host_memcpy_ce": ("d2h", "col", "", "copy engine, GPU(column) to pinned host memory"),
}


def _nvbandwidth_unrecorded(name: str) -> str:
    """Why a testcase gives no figure."""
    if name.endswith("_sm"):
        return "an SM kernel (testcases_sm.cpp), not the copy engine gputopo's copies use"
    if name.startswith("device_to_device_") and "_read_" in name:
        return (
            "a read: the receiving GPU issues it (PREFER_DST_CONTEXT) and pulls; gputopo's copy is pushed "
            "by the source, as in ..._write_ce"
        )
    return "gputopo measures nothing the same"


CONNECTIVITY = "P2P Connectivity Matrix"
# p2pBandwidthLatencyTest title -> (kind, where a cell's GPUs are, needs peer access). Its "(P2P Reads)"
# matrix is not one: cell [i][j] is performP2PCopy(buffers[i], i, buffers[j], j, ..., stream[i]), GPU i
# pulling from GPU j on its own stream, where gputopo's copy is pushed by the source, as "(P2P Writes)".
_P2P_READS = "Unidirectional P2P=Enabled Bandwidth (P2P Reads) Matrix (GB/s)"
_P2P_TEST = {
    "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)": ("p2p", "row->col", True),
    "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)": ("p2p_staged", "row->col", False),
    "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)": ("p2p_bidir", "row->col", True),
}


def _gpus_of(where: str, r: int, c: int) -> dict[str, int]:
    if where == "col":
        return {"gpu": c}
    src, dst = (r, c) if where == "row->col" else (c, r)
    return {"src": src, "dst": dst}


def _same_gpus(
    tool: str,
    file: str,
    count: int,
    topology: model.Topology,
    buses: Iterable[tuple[int, str | None]] = (),
    visible: str = "CUDA_VISIBLE_DEVICES",
) -> None:
    """Refuse a tool's output of another GPU count (or other PCI addresses); ``visible`` is what hides
    GPUs from that tool (nvidia-smi ignores CUDA_VISIBLE_DEVICES; a container's NVIDIA_VISIBLE_DEVICES
    is what it sees)."""
    if count != len(topology.gpus):
        raise ToolOutputError(
            f"{file}: {tool} saw {counted(count, 'GPU')} and the machine has {len(topology.gpus)}: "
            f"another machine, or another {visible} (run it with every GPU visible)"
        )
    for index, bus in buses:
        known = topology.gpus[index].pci_bus_id if index < count else None
        if bus and known and not known.upper().startswith(bus.upper()):
            raise ToolOutputError(
                f"{file}: {tool}'s device {index} is at {bus}, the machine's GPU{index} at "
                f"{known}: another machine, or GPUs numbered otherwise (CUDA_DEVICE_ORDER)"
            )


def _cells(matrix: Sequence[Sequence[float | None]], count: int) -> Iterator[tuple[int, int, float]]:
    """(row, column, value) of every printed off-diagonal figure inside the machine's GPUs (a figure
    no link could give, 0 or above ``MAX_GBPS``, is no figure: a profile would refuse it)."""
    for r, row in enumerate(matrix):
        for c, value in enumerate(row):
            if is_bandwidth(value) and r != c and r < count and c < count:
                yield r, c, value


def _host_cells(matrix: Sequence[Sequence[float | None]], count: int) -> Iterator[tuple[int, int, float]]:
    """(0, GPU, value) of a one-row matrix of host <-> GPU figures (nvbandwidth's CPU(row))."""
    for c, value in enumerate(matrix[0] if matrix else ()):
        if is_bandwidth(value) and c < count:
            yield 0, c, value


def _cell(matrix: Sequence[Sequence[float | None]], r: int, c: int) -> float | None:
    try:
        return matrix[r][c]
    except IndexError:
        return None


class RecordedFigures:
    """The figures of one or more tool outputs for ``topology``'s machine, in the order read: the
    first for a kind and its GPUs is kept (``published``); ``notes`` say what each output gave."""

    def __init__(self, topology: model.Topology) -> None:
        self.topology = topology
        self._found: dict[tuple[str, tuple[tuple[str, int], ...]], dict[str, Any]] = {}
        self.notes: list[str] = []

    @property
    def published(self) -> list[dict[str, Any]]:
        return list(self._found.values())

    def _add(self, kind: str, where: str, r: int, c: int, gbps: float, source: str) -> bool:
        gpus = _gpus_of(where, r, c)
        key = (kind, tuple(sorted(gpus.items())))
        if key in self._found:
            return False
        pinned = {"pinned": True} if kind in ("h2d", "d2h") else {}
        self._found[key] = {"kind": kind, "gbps": gbps, **gpus, **pinned, "source": source}
        return True

    def add_nvbandwidth(self, result: Nvbandwidth, file: str) -> None:
        count = len(self.topology.gpus)
        seen = len(result.devices) or max((len(m.columns) for t in result.testcases for m in t.matrices), default=0)
        if seen:  # a run that printed no device and no matrix says nothing of any GPU
            _same_gpus("nvbandwidth", file, seen, self.topology, [(i, bus) for i, _, bus in result.devices])
        version = result.version or "(version not printed)"
        for case in result.testcases:
            mapping = _NVBANDWIDTH.get(case.name)
            if case.status != "ran" or not case.matrices:
                self.notes.append(f"{file}: {case.name}: {case.status}, nothing to record")
                continue
            if mapping is None:
                self.notes.append(f"{file}: {case.name}: not recorded ({_nvbandwidth_unrecorded(case.name)})")
                continue
            kind, where, part, what = mapping
            # The bidirectional Total matrix by its SUM key, or by its title where the text was cut before it.
            matrix = (
                case.matrices[0]
                if not part
                else next((m for m in case.matrices if m.key == case.name + part or "Total bandwidth" in m.title), None)
            )
            if matrix is None:
                self.notes.append(
                    f"{file}: {case.name}: not recorded (no Total matrix: before v0.6 nvbandwidth "
                    f"printed one direction's figure under reverse traffic)"
                )
                continue
            cells = (_host_cells if where == "col" else _cells)(matrix.cells, count)
            source = f"nvbandwidth {version} {case.name} ({what}), {file}"
            kept = sum(self._add(kind, where, r, c, gbps, source) for r, c, gbps in cells)
            self.notes.append(f"{file}: {case.name}: {kept} {kind} figure(s) recorded")

    def add_p2p_test(self, result: P2PBandwidthLatency, file: str) -> None:
        count = len(self.topology.gpus)
        _same_gpus(
            "p2pBandwidthLatencyTest",
            file,
            len(result.devices) or result.n_gpus,
            self.topology,
            [(i, bus) for i, _, bus in result.devices],
        )
        access = result.matrices.get(CONNECTIVITY)
        for title, matrix in result.matrices.items():
            kind, where, peer = _P2P_TEST.get(title, (None, "", None))  # "": where is read only for a kind
            if kind is None:
                if title == _P2P_READS:
                    self.notes.append(
                        f"{file}: {title}: not recorded (a read: GPU(row) pulls from GPU(column) on its "
                        f"own stream; gputopo's copy is pushed by the source, as in (P2P Writes))"
                    )
                elif title != CONNECTIVITY:
                    self.notes.append(f"{file}: {title}: not recorded (gputopo measures nothing the same)")
            elif peer and access is None:
                self.notes.append(
                    f"{file}: {title}: not recorded: no {CONNECTIVITY} in the text, so which pairs "
                    f"copied peer to peer is unknown"
                )
            else:
                # Without peer access CUDA staged the "P2P=Enabled" copy through the host: not a P2P figure.
                kept = sum(
                    self._add(kind, where, r, c, gbps, f"cuda-samples p2pBandwidthLatencyTest {title}, {file}")
                    for r, c, gbps in _cells(matrix, count)
                    if not peer or _cell(access, r, c) == 1  # type: ignore[arg-type]  # access: read where peer
                )
                self.notes.append(f"{file}: {title}: {kept} {kind} figure(s) recorded")
