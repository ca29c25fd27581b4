"""The files a user names, and the files one run shares between its processes: read only when
they are regular files of a sane size, written whole or not at all.

A FIFO or a device at a path would block the run or never end; a file written in place is half a
file after a full disk or a kill; a device, a FIFO or /dev/stdout renamed over is gone (as root, from
the container's /dev). So a path is written by one rule (``write_text``), which every writer checks
up front (``unwritable``). No environment is read here.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile

MAX_INPUT_BYTES = 64 * 2**20  # 64 MiB: far above any profile, nvidia-smi output or NCCL log of one node


def read_text(
    path: str,
    limit: int = MAX_INPUT_BYTES,
    *,
    follow: bool = True,
    bound: str = "the most this tool reads",
    head: bool = False,
) -> str:
    """The text of a regular file of at most ``limit`` bytes. Anything else -- a FIFO or a device
    (which would block, never end, or act when opened: a tape rewinds), a folder, a symlink loop, a
    file too large -- is an ``OSError`` whose message says what the path is, and nothing but a regular
    file is ever opened: the path is looked at first, then opened without waiting, and what was opened
    must be what was looked at. ``follow=False``: a symlink is refused, not followed (a file found in a
    folder of other people's files, where a link may lead anywhere). ``bound`` says what ``limit`` is in
    the refusal of a file too large ("larger than 16 MiB, the most gputopo fleet reads of one document").
    ``head=True``: its first ``limit`` bytes, however large the file (what a file says it is)."""
    try:
        seen = os.stat(path) if follow else os.lstat(path)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISLNK(seen.st_mode):
        raise OSError(0, "a symbolic link, not followed here")
    if not stat.S_ISREG(seen.st_mode):
        raise OSError(0, f"not a regular file: it is {_what_is(seen.st_mode)}")
    too_large = OSError(0, f"larger than {_size_text(limit)}, {bound}")
    if seen.st_size > limit and not head:
        raise too_large
    # O_NONBLOCK: a FIFO put in its place meanwhile must not wait for a writer; O_NOFOLLOW: nor a link
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_NOCTTY", 0)
        | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    )
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot read: {exc.strerror or exc}") from None
    found = os.fstat(fd)
    if (found.st_dev, found.st_ino) != (seen.st_dev, seen.st_ino) or not stat.S_ISREG(found.st_mode):
        os.close(fd)
        raise OSError(0, "replaced while being opened: read it again")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit if head else limit + 1)
    if len(data) > limit:
        raise too_large
    return data.decode("utf-8", errors="replace")


def _what_is(mode: int) -> str:
    return (
        "a folder"
        if stat.S_ISDIR(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
    )


def _size_text(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit:,} bytes"


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` by the one rule every report and profile is written by:

    - a regular file, or a path where nothing is, is replaced atomically: ``text`` goes to a temporary
      file in the same folder, renamed over it, so that a full disk or a kill midway leaves the
      previous file as it was, never half a file;
    - a symlink is followed to the file its chain ends at, and that file is replaced atomically (the
      link stays a link); a dangling link makes the file it names;
    - a character device that discards what it is given (``/dev/null`` or a clone of it) is written
      through in place, never renamed over;
    - anything else -- a FIFO or pipe, a terminal or other device, a socket, a folder, and
      ``/dev/stdout``, ``/dev/fd/N`` or ``/proc/<pid>/fd/N`` whatever they lead to (renamed over the
      file the shell redirected to, the process's own output would go to a deleted file) -- is
      refused with an ``OSError`` saying what it is. A report is written
      whole, several times in a run, and a FIFO with no reader would stop the run: it is never
      streamed, and nothing that is not a regular file is ever renamed over.
    """
    target, through = _target(path)
    if through:
        _write_through(target, text)
        return
    _replace(target, text)


def _replace(target: str, text: str) -> None:
    """``text`` into a temporary file beside ``target``, renamed over it: the path holds the old file
    or the new one, never half of one."""
    fd, temp = tempfile.mkstemp(prefix=".gputopo-", dir=os.path.dirname(target) or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, 0o666 & ~_umask())  # as open() would have made it, not mkstemp's 0600
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def write_named(folder: str, name: str, text: str) -> str:
    """Write ``text`` as ``folder/name``, a file whose name the tool chose (not the user), in a folder
    others may write to too (a shared file system the nodes of a cluster write into): atomically, as
    ``write_text`` does, but what is at that path is replaced only if it is a regular file; a symlink
    there is refused, not followed (a link planted under the name would send the file elsewhere), as
    is anything else. The rename replaces the path itself, so a link made there meanwhile is replaced,
    never written through. Returns the path written; an ``OSError`` says why it was refused."""
    if not name or name in (".", "..") or os.sep in name or (os.altsep and os.altsep in name):
        raise OSError(errno.EINVAL, f"{name!r}: not a file name")
    path = os.path.join(folder, name)
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    if found is not None and not stat.S_ISREG(found.st_mode):
        what = "a symlink" if stat.S_ISLNK(found.st_mode) else _kind(found.st_mode)
        raise OSError(errno.EINVAL, f"{path}: it is {what}: only a regular file is replaced here")
    _replace(path, text)
    return path


def _target(path: str) -> tuple[str, bool]:
    """(the path to write, whether it is written through in place rather than replaced) for
    ``path`` by ``write_text``'s rule, or an ``OSError`` whose message says why it is refused."""
    try:
        found = os.stat(path)  # follows every symlink
    except (FileNotFoundError, NotADirectoryError):
        found = None
    except OSError as exc:
        reason = "a symlink loop" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise OSError(exc.errno, reason) from None
    if found is None:  # nothing there, or a dangling symlink: the file is made where the links end
        target = os.path.realpath(path)
        folder = os.path.dirname(target)
        if not os.path.isdir(folder):
            raise OSError(errno.ENOENT, f"no folder {folder}")
        if os.path.lexists(target):  # a link out of reach, or something that appeared meanwhile
            raise OSError(errno.EINVAL, f"{target}: not a file this tool can replace")
        return target, False
    mode = found.st_mode
    if stat.S_ISREG(mode):
        if _via_proc(path):  # /dev/stdout > log: renaming over log would lose what the process writes to it
            raise OSError(
                errno.EINVAL,
                "it is a process's open file (/dev/stdout, /dev/fd/N, /proc/...): "
                "a report is never renamed over it; name the file itself",
            )
        target = os.path.realpath(path)
        try:
            same = os.lstat(target)
        except OSError:
            same = None
        if same is None or not stat.S_ISREG(same.st_mode) or (same.st_dev, same.st_ino) != (found.st_dev, found.st_ino):
            # a /proc/<pid>/fd link to a deleted or unnamed file: no path to replace it at
            raise OSError(errno.EINVAL, "a link to a file with no path of its own to replace")
        return target, False
    if _discards(found):
        return path, True
    raise OSError(
        errno.EINVAL,
        f"it is {_kind(mode)}"
        + (
            ""
            if stat.S_ISDIR(mode)
            else ": a report is written whole and replaced, never streamed or renamed over "
            "anything but a regular file; write a file and read that"
        ),
    )


def _via_proc(path: str) -> bool:
    """Whether ``path``, or a link on its way to a file, lies under /proc (``/dev/stdout`` ->
    ``/proc/self/fd/1``): its links are a process's open files, not places to make a file at."""
    current = os.path.abspath(path)
    for _ in range(64):  # more hops than that is a loop, which os.stat has refused already
        folder = os.path.realpath(os.path.dirname(current))
        if folder == "/proc" or folder.startswith("/proc/"):
            return True
        if not os.path.islink(current):
            return False
        current = os.path.join(folder, os.readlink(current))
    return True


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO or pipe"
    if stat.S_ISCHR(mode):
        return "a character device (a terminal, or a device other than /dev/null)"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _discards(found: os.stat_result) -> bool:
    """Whether ``found`` is the null device (``/dev/null``, or a node made with its numbers)."""
    if not stat.S_ISCHR(found.st_mode):
        return False
    try:
        null = os.stat(os.devnull).st_rdev
    except OSError:
        null = os.makedev(1, 3)  # Linux's numbers for it
    return found.st_rdev in (null, os.makedev(1, 3))


def _write_through(path: str, text: str) -> None:
    """Write ``text`` into the null device at ``path``: opened as it is (no create, no truncate,
    never waiting), checked again once open, written, closed."""
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not _discards(os.fstat(fd)):
            raise OSError(errno.EINVAL, "no longer the null device")
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def append_text(path: str, text: str) -> None:
    """Append ``text`` to a regular file (created if missing), as a file other steps also append to
    (GitHub's job summary) is written: never to a FIFO or a device, which could block the run."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o666)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"cannot append: {path} is not a regular file")
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written by ``write_text``'s rule (``no folder ...``, ``it is a folder``,
    ``it is a FIFO or pipe: ...``, ``permission denied``, ``cannot create a file in /proc: ...``), or
    None: asked by every writer before its work starts, so that a bad path is refused before it, not a
    result lost after it. A file is really made (and removed) in the folder the report will land in,
    as root's ``access()`` says yes to /proc or a read-only bind mount."""
    try:
        target, through = _target(path)
    except OSError as exc:
        return exc.strerror or str(exc)
    if through:
        try:
            os.close(os.open(target, os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NONBLOCK", 0)))
        except OSError as exc:
            return exc.strerror or str(exc)
        return None
    if os.path.lexists(target) and not os.access(target, os.W_OK):
        return "permission denied"
    folder = os.path.dirname(target)
    try:
        fd, temp = tempfile.mkstemp(prefix=".gputopo-probe-", dir=folder)
    except OSError as exc:
        return f"cannot create a file in {folder}: {exc.strerror or exc}"
    os.close(fd)
    try:
        os.unlink(temp)
    except OSError:
        pass
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


def read_private(path: str, limit: int = 4096) -> bytes:
    """The bytes of a secret kept in a file, as ssh takes a private key: a regular file of at most
    ``limit`` bytes, owned by this user, that nobody else may read or write (no group or other bits
    in its mode, as ``umask 077`` makes it). Anything else is an ``OSError`` saying what is wrong."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise OSError(exc.errno, f"cannot read: {exc.strerror or exc}") from None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise OSError(0, f"not a regular file: it is {_kind(found.st_mode)}")
        if hasattr(os, "getuid") and found.st_uid != os.getuid():
            raise OSError(0, f"owned by user id {found.st_uid}, not by this user ({os.getuid()})")
        if found.st_mode & 0o077:
            raise OSError(
                0, f"others may read or write it (mode {stat.S_IMODE(found.st_mode):04o}): make it 0600 (chmod 600)"
            )
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(0, f"larger than {limit} bytes, the most a secret is read from")
    return data
