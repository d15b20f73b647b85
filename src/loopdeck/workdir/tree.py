"""A working copy's tree as a run's state: each file's relative path and content hash, rehashed
only where its size, mtime or ctime moved since the last look (no times in the state). The
ctime is what an agent cannot put back: a same-size rewrite with its old mtime restored
(`os.utime`) still moves it, so it is rehashed and seen. A file's executable and setuid bits
are part of its entry; a symbolic link is its own entry (the text it points to), as are FIFOs,
devices and empty folders. `.git/`, `.venv/`, `node_modules/` and caches are left out (a
user's folder worked on in place may hold them, large and churning) but for the few paths in
them that run code at the operator's next command: `.git/config`, `.git/hooks/`,
`.venv/bin/` and `.venv/pyvenv.cfg`. What is left out is not watched: a write there is not
seen (README, "What loopdeck can prevent").

Walked with `os.scandir` and plain strings, no pathlib objects: the whole tree is walked for
every call an agent makes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from stat import S_ISDIR, S_ISFIFO, S_ISLNK, S_ISREG, S_ISSOCK
from typing import Any

SKIPPED = frozenset(
    {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv", "node_modules"}
)
# Of the skipped folders, what is watched all the same: small, and what runs the agent's
# code at the operator's next command (a git hook, `core.fsmonitor`, the venv's python).
WATCHED_INSIDE = {".git": ("config", "hooks"), ".venv": ("bin", "pyvenv.cfg")}
MODE_BITS = 0o7111  # the executable, setuid, setgid and sticky bits: kept in the state
EMPTY_FOLDER = "folder"  # an empty folder's entry, keyed by its path and a "/"

# relative path -> (size, mtime_ns, ctime_ns, content hash)
Known = dict[str, tuple[int, int, int, str]]


class FileTree:
    """The tree under `root`, as last looked at."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._hashes: Known = {}

    def snapshot(self) -> dict[str, Any]:
        """`{"files": {path: hash}}`, sorted by path."""
        seen: Known = {}
        walk(self._hashes, seen, os.fspath(self.root), "")
        self._hashes = seen
        return {"files": {rel: seen[rel][3] for rel in sorted(seen)}}


def walk(known: Known, seen: Known, top: str, prefix: str) -> None:
    """Each entry under `top` into `seen`, keyed `prefix` + its posix path: a file by its
    content's hash (and its mode bits, `MODE_BITS`, when any is set: `HASH mode 755`), hashed
    again only where its size, mtime or ctime moved since `known`; a symbolic link by the
    text it points to (never followed: a link to a folder is an entry, not a walk); a FIFO,
    socket or device by its kind (never opened); an empty folder as `EMPTY_FOLDER` under
    its path and a "/". A skipped folder's name is not entered, but for what
    `WATCHED_INSIDE` names in it."""
    folders = [(top, prefix)]
    while folders:
        folder, prefix = folders.pop()
        try:
            entries = os.scandir(folder)
        except OSError:  # gone or unreadable: as os.walk, nothing from it
            continue
        empty = True
        with entries:
            for entry in entries:
                empty = False
                if _is_folder(entry):
                    rel = f"{prefix}{entry.name}/"
                    if entry.name not in SKIPPED:
                        folders.append((entry.path, rel))
                    for name in WATCHED_INSIDE.get(entry.name, ()):
                        _inside(known, seen, folders, os.path.join(entry.path, name), rel + name)
                    continue
                _entry(known, seen, entry.path, prefix + entry.name, entry)
        if empty and prefix:
            seen[prefix] = (0, 0, 0, EMPTY_FOLDER)


def _inside(known: Known, seen: Known, folders: list[tuple[str, str]], path: str, rel: str) -> None:
    """A watched path in a skipped folder: a folder walked, anything else an entry."""
    try:
        stat = os.lstat(path)
    except OSError:
        return
    if S_ISDIR(stat.st_mode):
        folders.append((path, rel + "/"))
    else:
        _entry(known, seen, path, rel, None, stat)


def _entry(
    known: Known,
    seen: Known,
    path: str,
    rel: str,
    entry: os.DirEntry[str] | None,
    stat: os.stat_result | None = None,
) -> None:
    try:
        if stat is None:
            assert entry is not None
            stat = entry.stat(follow_symlinks=False)
    except OSError:
        return
    mode = stat.st_mode
    now = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if S_ISLNK(mode):
        try:
            target = os.readlink(path)
        except OSError:
            return
        seen[rel] = (*now, "link " + _short(target.encode("utf-8", "surrogateescape")))
        return
    if not S_ISREG(mode):  # a FIFO or a device: opening it would block
        seen[rel] = (*now, "special " + _kind(mode))
        return
    bits = mode & MODE_BITS
    was = known.get(rel)
    if was is not None and was[:3] == now:
        seen[rel] = was
    else:
        seen[rel] = (*now, digest(path) + (f" mode {bits:o}" if bits else ""))


def _kind(mode: int) -> str:
    if S_ISFIFO(mode):
        return "fifo"
    if S_ISSOCK(mode):
        return "socket"
    return "device"


def _short(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)  # a link to a folder is an entry
    except OSError:  # os.walk takes it for a file
        return False


def digest(path: str) -> str:
    hasher = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                hasher.update(block)
    except OSError:
        return "unreadable"
    return hasher.hexdigest()[:16]


def relative(path: str, root: Path) -> str:
    """`path` (absolute, or relative to `root`) relative to `root`, posix; as given when it
    is outside."""
    try:
        target = Path(path) if Path(path).is_absolute() else root / path
        return target.resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError):
        return path
