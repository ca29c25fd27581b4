"""The files a user names, and the files one run shares between its processes: read only when
they are regular files of a sane size, written whole or not at all.

A FIFO or a device at a path would block the run or never end; a file written in place is half a
file after a full disk or a kill. No environment is read here.
"""

from __future__ import annotations

import os


MAX_INPUT_BYTES = 64 * 2**20  # 64 MiB: far above any profile, nvidia-smi output or NCCL log of one node


def read_text(path: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The text of a regular file of at most ``limit`` bytes. Anything else -- a FIFO or a device
    (which would block or never end), a folder, a symlink loop, a file too large -- is an
    ``OSError`` whose message says what the path is."""
    import stat

    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)  # opening a FIFO must not wait for a writer
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot read: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket")
        raise OSError(0, f"not a regular file: it is {kind}")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(0, f"larger than {limit // 2**20} MiB, the most this tool reads")
    return data.decode("utf-8", errors="replace")


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, renamed over it: a
    full disk or a kill midway leaves the previous file as it was, never half a file."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=".gputopo-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, 0o666 & ~_umask())  # as open() would have made it, not mkstemp's 0600
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def append_text(path: str, text: str) -> None:
    """Append ``text`` to a regular file (created if missing), as a file other steps also append to
    (GitHub's job summary) is written: never to a FIFO or a device, which could block the run."""
    import stat

    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o666)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"cannot append: {path} is not a regular file")
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written (``no folder ...``, ``it is a folder``, ``permission denied``), or
    None: asked before long work, so that a bad path is refused before it, not a result lost after it."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        return "it is a folder"
    if not os.path.isdir(folder):
        return f"no folder {folder}"
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return "permission denied"
    return None


def _umask() -> int:
    """The process's umask, read (Linux: /proc/self/status) rather than set and restored."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
