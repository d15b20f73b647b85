"""A working copy's tree as a run's state: each file's relative path and content hash, rehashed
only where its size, mtime or ctime moved since the last look (no times in the state). The
ctime is what an agent cannot put back: a same-size rewrite with its old mtime restored
(`os.utime`) still moves it, so it is rehashed and seen. `.git/`,
`.venv/`, `node_modules/` and caches are left out: a user's folder worked on in place may hold
them, large and churning, and they are not the agent's work.

Walked with `os.scandir` and plain strings, no pathlib objects: the whole tree is walked for
every call an agent makes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from stat import S_ISREG
from typing import Any

SKIPPED = frozenset(
    {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv", "node_modules"}
)

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
    """Each file under `top` (as `os.walk` finds them: a link to a folder not followed, a
    skipped folder's name not entered) into `seen`, keyed `prefix` + its posix path; hashed
    again only where its size, mtime or ctime moved since `known`."""
    folders = [(top, prefix)]
    while folders:
        folder, prefix = folders.pop()
        try:
            entries = os.scandir(folder)
        except OSError:  # gone or unreadable: as os.walk, nothing from it
            continue
        with entries:
            for entry in entries:
                if _is_folder(entry):
                    if entry.name not in SKIPPED and not entry.is_symlink():
                        folders.append((entry.path, f"{prefix}{entry.name}/"))
                    continue
                try:
                    stat = entry.stat()  # a link's target, as Path.stat
                except OSError:
                    continue
                if not S_ISREG(stat.st_mode):  # a FIFO or a device: opening it would block
                    continue
                rel = prefix + entry.name
                now = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
                was = known.get(rel)
                if was is not None and was[:3] == now:
                    seen[rel] = was
                else:
                    seen[rel] = (*now, digest(entry.path))


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
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
