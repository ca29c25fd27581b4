"""The machine's facts for one run: learned on first need, with only what the run's questions need,
once per run.

What the run needs is known when its tests are collected (each requirement's ``facts``, the plugin's
fixtures) or from its options (a run gate, a check, a report); a run that asks nothing probes
nothing. The xdist processes of one run learn it once, through the run's private folder: the first
that needs it probes under a lock, the others read what it wrote. CUDA's view and torch's versions
are kept for the rest of the boot in pytest's cache (``BootRecord``), so a repeat run asks NVML only.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Callable

import pytest

from ..runtime import files

try:
    import fcntl
except ImportError:  # not POSIX: each process learns for itself
    fcntl = None  # type: ignore[assignment]

FIXTURES = ("gputopo", "gputopo_bench", "gputopo_ranks", "gputopo_gpus")  # each hands a test the machine's facts
RECORD_PREFIX = "gputopo/boot"
MACHINE_FILE = "machine.learned"  # not .json: the run's folder holds benchmark results as *.json


class Machine:
    """The run's topology, learned on first use (``topology``) with every fact the run needs by then
    (``need``); all facts when nothing said what it needs (a third party asking, say)."""

    def __init__(self, learn: Callable[[frozenset], tuple], known=None) -> None:
        self._learn = learn  # needs -> (topology, notes)
        self.needs: set = set()
        self._known = None if known is None else (known, ())
        self.warnings: list[str] = []  # the run's own, for the header (a launch without torch)
        self.leave: list[str] = []  # marker names the project registered itself: its marks are its own
        self.header_shown = False
        self.used = False  # the run uses the plugin: set once, when its ranks (if any) were joined

    def adopt(self, known: tuple) -> None:
        """(topology, notes) another process of the run learned (the xdist controller, at the end)."""
        if self._known is None:
            self._known = known

    def need(self, facts) -> None:
        self.needs |= set(facts)

    @property
    def learned(self) -> bool:
        return self._known is not None

    @property
    def topology(self):
        return self.learn()

    def learn(self):
        """The topology, learned now if it was not yet: the probe, once per run."""
        if self._known is None:
            from ..core.model import ALL_FACTS

            self._known = self._learn(frozenset(self.needs) or ALL_FACTS)
        return self._known[0]

    @property
    def notes(self) -> tuple[str, ...]:
        """What was probed and what was taken from this boot's record (empty before, or when not this host)."""
        return self._known[1] if self._known is not None else ()


def item_facts(item, requirements) -> set:
    """What one selected test needs learned: its requirements' facts, and all of them where it takes
    one of the plugin's fixtures (which hand it the machine itself)."""
    facts = set()
    for requirement, _ in requirements:
        facts |= requirement.facts
    if any(name in FIXTURES for name in getattr(item, "fixturenames", ())):
        from ..core.model import ALL_FACTS

        facts |= ALL_FACTS
    return facts


class BootRecord:
    """CUDA's view and torch's versions for the rest of this boot, in pytest's cache (``probe.BootRecord``).
    ``reprobe``: ask again, and keep the new answers."""

    def __init__(self, cache, reprobe: bool) -> None:
        self.cache, self.reprobe = cache, reprobe

    def get(self, key: str) -> dict | None:
        if self.reprobe or not self._private(f"{RECORD_PREFIX}/{key}"):
            return None
        try:
            value = self.cache.get(f"{RECORD_PREFIX}/{key}", None)
        except (RecursionError, ValueError):  # a file anyone could have written: ask again
            return None
        return value if isinstance(value, dict) else None

    def _private(self, key: str) -> bool:
        """Whether the record is one only this user could have written: the file and every folder from
        the cache's down to it this user's own, none a link, none writable by others, nor by a group but
        the user's own (a group named as the user with no other members: Debian and Ubuntu give every
        user one, with a umask of 002, so pytest's own folders are group-writable there). pytest's cache
        lives in the checkout, which others may share: a record planted there would decide
        ``requires_p2p`` either way (nothing is read, and the question is asked again, otherwise)."""
        parts = self._parts(key)
        if not parts:
            return False
        for part in parts:
            try:
                st = os.lstat(part)
            except OSError:
                return False
            kind = stat.S_ISREG if part == parts[-1] else stat.S_ISDIR
            writable = st.st_mode & 0o002 or (st.st_mode & 0o020 and not _own_group(st.st_gid))
            if not kind(st.st_mode) or st.st_uid != os.getuid() or writable:
                return False
        return True

    def _parts(self, key: str) -> list:
        """The cache's folder, each folder down to the record's file, and the file (pytest's Cache:
        ``_cachedir / "v" / key``); [] for a cache of another shape."""
        getvaluepath = getattr(self.cache, "_getvaluepath", None)
        top = getattr(self.cache, "_cachedir", None)
        if getvaluepath is None or top is None:
            return []
        path = getvaluepath(key)
        return [top, *reversed([p for p in path.parents if top in p.parents]), path]

    def put(self, key: str, value: dict) -> None:
        self.cache.set(f"{RECORD_PREFIX}/{key}", value)
        # The record's own file and folders, this user's alone whatever the umask (pytest's own two
        # folders above them are left as pytest made them).
        parts = self._parts(f"{RECORD_PREFIX}/{key}")
        for part in parts[2:]:
            try:
                if not os.path.islink(part) and os.stat(part).st_uid == os.getuid():
                    os.chmod(part, 0o600 if part == parts[-1] else 0o700)
            except OSError:
                pass  # then not read back: asked again next run


def _own_group(gid: int) -> bool:
    """Whether ``gid`` is this user's own group: named as the user, with no other members listed."""
    try:
        import grp
        import pwd

        group, user = grp.getgrgid(gid), pwd.getpwuid(os.getuid())
    except (KeyError, ImportError):
        return False
    return gid == user.pw_gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def boot_record(config: pytest.Config, reprobe: bool) -> BootRecord | None:
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    return BootRecord(cache, reprobe) if cache is not None else None


def shared(folder: str, learn: Callable[[frozenset], tuple]) -> Callable[[frozenset], tuple]:
    """``learn``, done once by the processes sharing ``folder`` (an xdist run's private folder): the
    first to need the machine probes under a lock and writes it; the others read it. A process that
    needs facts the written one lacks probes again with both (and writes that)."""
    from ..core import schema

    path = os.path.join(folder, MACHINE_FILE)

    def learn_once(needs: frozenset) -> tuple:
        with _locked(os.path.join(folder, "machine.lock")):
            try:
                with open(path, encoding="utf-8") as f:
                    kept = json.load(f)
                if needs <= set(kept["needs"]):
                    return schema.from_dict(kept["topology"]), tuple(kept["notes"])
                needs = needs | set(kept["needs"])
            except (OSError, ValueError, KeyError, TypeError, schema.SchemaError):
                pass  # none yet (or unreadable): learn it here
            topology, notes = learn(needs)

            files.write_text(
                path, json.dumps({"needs": sorted(needs), "topology": schema.to_dict(topology), "notes": list(notes)})
            )
            return topology, notes

    return learn_once


def learned_by_others(folder: str) -> tuple | None:
    """(topology, notes) the xdist workers of the run learned, or None when none needed it."""
    from ..core import schema

    try:
        with open(os.path.join(folder, MACHINE_FILE), encoding="utf-8") as f:
            kept = json.load(f)
        return schema.from_dict(kept["topology"]), tuple(kept["notes"])
    except (OSError, ValueError, KeyError, TypeError, schema.SchemaError):
        return None


@contextlib.contextmanager
def _locked(path: str):
    if fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
