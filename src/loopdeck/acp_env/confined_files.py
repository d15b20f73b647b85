"""A file of the working copy opened with no link followed, for the agent's reads
(`fs/read_text_file`) and the writes loopdeck makes for it (`fs/write_text_file`).

`bridge.inside` resolves the agent's path once; the agent runs its own tools meanwhile and may
swap a folder of that path (or the file itself) for a link to somewhere else before the file
is opened. So the file is reached from the working copy's root one name at a time, each folder
opened from the one before (`dir_fd`) with `O_NOFOLLOW`, and the file itself opened without
following a link: a path a link replaced since it was resolved raises `OSError` (`ELOOP`,
`ENOTDIR`), and nothing outside the working copy is read or written, whatever the agent swaps.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from stat import S_ISREG

NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def opened_inside(root: Path, target: Path, flags: int, make_folders: bool = False) -> int:
    """`target` (resolved inside `root`) opened with `flags` and no link followed: each
    folder opened from the one before it (made where missing, `make_folders`), the file
    itself with `O_NOFOLLOW`. Its file descriptor; `OSError` when a link stands in the way."""
    parts = target.relative_to(root).parts
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "the working copy itself")
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[:-1]:
            if make_folders:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=folder)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW, dir_fd=folder)
            os.close(folder)
            folder = inner
        return os.open(parts[-1], flags | NOFOLLOW, 0o666, dir_fd=folder)
    finally:
        os.close(folder)


def read_inside(root: Path, target: Path) -> str:
    """The text of a regular file of the working copy, read with no link followed (a FIFO or
    a device is refused, never waited on: `O_NONBLOCK`), as `Path.read_text` reads it
    (undecodable bytes replaced, line ends as `\n`)."""
    fd = opened_inside(root, target, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, encoding="utf-8", errors="replace") as file:
        if not S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EPERM, "not a regular file")
        return file.read()


def write_inside(root: Path, target: Path, content: bytes) -> None:
    """`content` written to a file of the working copy with no link followed (its folders
    made where missing), refused if it is hard-linked elsewhere (a write through it would
    change a file outside the working copy)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK  # a FIFO with no reader: refused
    fd = opened_inside(root, target, flags, make_folders=True)
    with os.fdopen(fd, "wb") as file:
        stat = os.fstat(fd)
        if not S_ISREG(stat.st_mode) or stat.st_nlink > 1:
            raise OSError(errno.EPERM, "not a file of the working copy's own (a hard link?)")
        file.truncate(0)
        file.write(content)
