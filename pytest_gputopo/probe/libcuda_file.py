"""Which ``libcuda.so.1`` a CUDA child would load, told by the file's identity without loading it: a
driver updated in place (the same path, another file) is another CUDA for this boot's record.

The loader's order for a name without a slash (glibc ``elf/dl-load.c`` ``_dl_map_object``, ld.so(8)):
``LD_LIBRARY_PATH``'s folders, then ``/etc/ld.so.cache``, then the default folders. Not followed: the
calling object's DT_RPATH/DT_RUNPATH and the glibc-hwcaps subfolders (no driver installs libcuda there).
"""

from __future__ import annotations

import os
import struct
import sys

from ..runtime import environ as runtime

NAME = "libcuda.so.1"
LD_SO_CACHE = "/etc/ld.so.cache"
_ARCH = getattr(sys.implementation, "_multiarch", None)  # Debian's loader also searches its triplet's
DEFAULT_DIRS = (*((f"/lib/{_ARCH}", f"/usr/lib/{_ARCH}") if _ARCH else ()), "/lib", "/usr/lib", "/lib64", "/usr/lib64")
_MAX_CACHE_BYTES = 1 << 22  # a system's whole cache is tens of KB

# glibc sysdeps/generic/dl-cache.h: struct cache_file_new is the magic "glibc-ld.so.cache" "1.1",
# nlibs, len_strings and 20 bytes more (48 in all), then nlibs struct file_entry_new {int32 flags;
# uint32 key, value; uint32 osversion; uint64 hwcap;} (24 bytes); key and value are offsets of
# NUL-ended strings from the start of cache_file_new (which follows the old format's table, if any).
_NEW_MAGIC = b"glibc-ld.so.cache1.1"
_HEADER_BYTES = 48
_ENTRY_BYTES = 24


def identity(path: str) -> list | None:
    """The file at ``path`` as the loader would open it: where its links lead, and its device, inode,
    size and modification time (a file replaced at the same path, or a link repointed, differs); None
    where there is none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def cache_paths(name: str = NAME, cache: str = LD_SO_CACHE) -> list[str] | None:
    """The paths ``ld.so.cache`` lists for ``name`` (every architecture's: taking more than the loader
    would only asks again more often); None where the cache cannot be read in its new format."""
    try:
        with open(cache, "rb") as f:
            data = f.read(_MAX_CACHE_BYTES)
    except OSError:
        return None
    start = data.find(_NEW_MAGIC)
    if start < 0 or len(data) < start + _HEADER_BYTES:
        return None
    (nlibs,) = struct.unpack_from("=I", data, start + len(_NEW_MAGIC))
    first = start + _HEADER_BYTES
    wanted = name.encode()
    if wanted + b"\0" not in data:  # not listed at all: spare the walk over every entry
        return []
    found = []
    for n in range(min(nlibs, (len(data) - first) // _ENTRY_BYTES)):
        _flags, key, value = struct.unpack_from("=iII", data, first + n * _ENTRY_BYTES)
        if _string(data, start + key) == wanted:
            found.append(_string(data, start + value).decode("utf-8", "surrogateescape"))
    return found


def _string(data: bytes, at: int) -> bytes:
    end = data.find(b"\0", at)
    return data[at:end] if 0 <= at < len(data) and end >= 0 else b""


def loaded_identity() -> list:
    """What tells the ``libcuda.so.1`` a child would load: each ``LD_LIBRARY_PATH`` candidate up to the
    first that exists (one that appears later takes precedence, so a missing one counts too); else the
    files the cache lists, or the cache's own identity where it cannot be read; else the default
    folders'. Paths with their identities; stat calls only, no library loaded."""
    seen: list = []
    folders = runtime.library_path()
    for folder in folders.replace(";", ":").split(":") if folders else ():
        path = os.path.join(folder or ".", NAME)  # an empty entry is the working folder, as for the loader
        seen.append([path, identity(path)])
        if seen[-1][1] is not None:
            return seen
    listed = cache_paths()
    if listed is None:
        seen.append([LD_SO_CACHE, identity(LD_SO_CACHE)])
    else:
        seen += [[path, identity(path)] for path in listed]
        if listed:
            return seen
    return seen + [[os.path.join(d, NAME), identity(os.path.join(d, NAME))] for d in DEFAULT_DIRS]
