"""This boot's kernel log, read without blocking, for the XID lines of the NVIDIA driver (``core.xid``).

``/dev/kmsg`` gives one record per read and EAGAIN once none is left when opened with O_NONBLOCK
(the kernel's Documentation/ABI/testing/dev-kmsg); EPIPE means records were overwritten before
they were read, and reading goes on from the oldest left. Reading it needs CAP_SYSLOG where
``kernel.dmesg_restrict`` is 1, and a container seldom has it: None then, unknown, never "no XID".
At most ``MAX_BYTES`` are read, under a deadline: the ring buffer is small, but a file is never
trusted to end.
"""

from __future__ import annotations

import errno
import os
import time

KMSG = "/dev/kmsg"
MAX_BYTES = 16 * 2**20
DEADLINE_S = 2.0
_RECORD = 8192  # a record is at most 1 KiB of text plus its header in practice; a read takes one whole


def read_log(path: str = KMSG) -> str | None:
    """The log's records as they were read (each ends with its newline); None where it cannot be
    opened or read. A regular file (a saved log) is read whole, up to ``MAX_BYTES``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    records: list[bytes] = []
    size, ends = 0, time.monotonic() + DEADLINE_S
    try:
        while size < MAX_BYTES and time.monotonic() < ends:
            try:
                record = os.read(fd, _RECORD)
            except BlockingIOError:
                break  # none left
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # overwritten while read: go on from the oldest left
                return None
            if not record:
                break  # a regular file's end
            records.append(record)
            size += len(record)
    finally:
        os.close(fd)
    return b"".join(records).decode("utf-8", "replace")
