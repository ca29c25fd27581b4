"""The folder the processes of one run on this host share their results in (xdist workers, a leased
test's process): one JSON file a figure, its GPUs named by UUID, read back in the reader's numbering."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from ..core import keys, model
from ..runtime import files
from .bench_result import BenchResult


def _renumbered(data: dict, key: keys.Key) -> dict:
    """``data``, a result another process wrote in its numbering, as the result of ``key`` (the same
    GPUs here): its key, and its words' subject ("GPU0->GPU1 copy"), those of this numbering."""
    try:
        theirs = keys.from_list(data.get("key"))
    except ValueError:
        return data  # not a result: the suite's check says why
    what = data.get("what")
    said = theirs.describe()
    if isinstance(what, str) and what.startswith(said):
        what = key.describe() + what[len(said) :]
    return {**data, "key": key.to_list(), "what": what}


def _in_numbering(data: dict, where: dict[str, int]) -> dict:
    """A shared result whose GPUs are named by UUID (``gpus``), in the numbering ``where`` gives."""
    theirs = keys.from_list(data.get("key"))
    uuids = data["gpus"]
    if not isinstance(uuids, list) or len(uuids) != len(keys.gpus_of(theirs)) or not all(u in where for u in uuids):
        raise ValueError("its GPUs are not this run's")
    return _renumbered(data, keys.renumbered(theirs, tuple(where[u] for u in uuids)))


class SharedFolder:
    """Results the processes of one run on this host share (xdist workers, and a leased test's process,
    which numbers its leased GPUs from cuda:0): one JSON file each. A figure of GPUs is shared under
    their UUIDs, never their indices, and read back in the reader's numbering (``get_figure``,
    ``results``); ``get_figure``/``put_figure`` are what :class:`BenchSuite` needs of a share
    (``ranks.NodeShare`` is the other)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _figure_name(self, key: keys.Key, name: str, uuids: list[str] | None) -> str:
        """``name`` (``keys.name_of`` and what else makes the figure) where the GPUs are not known by
        UUID; else its kind and a digest of the GPUs' UUIDs with what is not a GPU index."""
        if uuids is None:
            return name
        suffix = name[len(keys.name_of(key)) :]  # what else makes the figure: an all-reduce's backend
        rest = [key.kind, getattr(key, "pinned", None), getattr(key, "ranks", None), getattr(key, "size_bytes", None)]
        digest = hashlib.sha256(json.dumps([rest, suffix, uuids]).encode()).hexdigest()[:24]
        return f"{key.kind}-{digest}"

    def get_figure(self, key: keys.Key, name: str, uuids: list[str] | None) -> Any:
        """The result another process left for ``key`` on the GPUs of ``uuids`` (None: by index), in
        this process's numbering; None where there is none. Checked whole by the suite after."""
        data = self.get(self._figure_name(key, name, uuids))
        if data is None or uuids is None:
            return data
        if not isinstance(data, dict) or data.get("gpus") != uuids:
            raise ValueError("it is the figure of other GPUs")
        return _renumbered(data, key)

    def put_figure(self, key: keys.Key, name: str, uuids: list[str] | None, data: dict) -> None:
        self.put(self._figure_name(key, name, uuids), {**data, **({"gpus": uuids} if uuids else {})})

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name + ".json")

    def get(self, name: str) -> Any:
        """The JSON value stored under ``name``, None when there is none; a file that cannot be read
        whole (a worker killed while writing one before renames were atomic) is a ValueError."""
        try:
            text = files.read_text(self._file(name))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ValueError(f"{self._file(name)}: {exc.strerror or exc}") from None
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            raise ValueError(f"{self._file(name)} is not whole JSON") from None

    def put(self, name: str, data: dict) -> None:
        files.write_text(self._file(name), json.dumps(data, allow_nan=False))

    def names(self) -> list[str]:
        try:
            return sorted(n[: -len(".json")] for n in os.listdir(self.path) if n.endswith(".json"))
        except OSError:  # not made yet, or removed at the end
            return []

    def results(self, topology: model.Topology) -> tuple[list[BenchResult], list[str]]:
        """Every result in the folder (what the xdist workers and leased tests' processes measured,
        for the controller's report) in ``topology``'s numbering, and why each file that could not be
        taken was not."""
        where = {gpu.uuid: gpu.index for gpu in topology.gpus if gpu.uuid}
        taken, lost = [], []
        for name in self.names():
            try:
                data = self.get(name)
                if isinstance(data, dict) and "gpus" in data:
                    data = _in_numbering(data, where)
                taken.append(BenchResult.from_json(data))
            except ValueError as exc:
                lost.append(f"{name}: {exc}")
        return taken, lost
