"""What a store keeps on disk is private to its owner: a SQLite store, its `-wal` and `-shm`,
a spill of unsaved events (0600), and loopdeck's data folder (0700). A file or folder that
cannot be made so (another user's, or one whose mode cannot be changed) is refused by name, and
so is a path that is not a regular file (a device, a fifo, a socket): never opened, never
changed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from loopdeck.store.base import StoreError, data_folder

FILE_MODE = 0o600
FOLDER_MODE = 0o700
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")

__all__ = [
    "data_folder",
    "owned_store_files",
    "private_file",
    "private_folder",
    "private_store_files",
    "store_folder",
]


def private_file(path: Path) -> None:
    """Tighten an existing file to its owner alone (group and others lose every bit); a file
    that is not there is left to be created 0600 by whoever creates it."""
    _tighten(path, "file")


def private_folder(path: Path) -> Path:
    """A folder only its owner can enter: made 0700 when missing, tightened when there."""
    path.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    _tighten(path, "folder")
    return path


def owned_store_files(store: Path) -> None:
    """Refuse a store, or a side file SQLite keeps beside it, that is not a regular file or
    belongs to another user, changing nothing: checked before the store is opened."""
    for path in _store_files(store):
        _found(path, "file")


def private_store_files(store: Path) -> None:
    """A SQLite store and the side files SQLite keeps beside it, tightened: only a store
    loopdeck created or has found to be a loopdeck store."""
    for path in _store_files(store):
        private_file(path)


def _store_files(store: Path) -> list[Path]:
    return [store, *(store.with_name(store.name + suffix) for suffix in SQLITE_SIDE_FILES)]


def store_folder(store: Path) -> None:
    """The folder a store file goes in. loopdeck's data folder is made and kept private; a
    folder the user chose is theirs: made 0700 only if loopdeck has to create it."""
    folder = store.parent
    if folder == data_folder() or not folder.exists():
        private_folder(folder)


def _found(path: Path, what: str) -> os.stat_result | None:
    """The file or folder there (None if there is none), refused by name if it is not one, or
    is another user's."""
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read its owner and mode: {exc.strerror or exc}") from exc
    is_kind, label = (
        (stat.S_ISDIR, "folder") if what == "folder" else (stat.S_ISREG, "regular file")
    )
    if not is_kind(found.st_mode):
        raise StoreError(
            f"{path}: not a {label} but {_kind(found.st_mode)}: loopdeck neither "
            "opens nor changes it"
        )
    me = os.geteuid()
    if found.st_uid != me:
        raise StoreError(
            f"{path}: this {what} belongs to {_user(found.st_uid)}, not to {_user(me)}; "
            "loopdeck keeps its store private to its owner: use a store of your own "
            "(--db) or give this one to this user"
        )
    return found


def _tighten(path: Path, what: str) -> None:
    found = _found(path, what)
    if found is None:
        return
    mode = stat.S_IMODE(found.st_mode)
    if mode & 0o077 == 0:
        return
    try:
        os.chmod(path, mode & 0o700)
    except OSError as exc:
        raise StoreError(
            f"{path}: this {what} is open to other users (mode {mode:04o}) and cannot be made "
            f"private: {exc.strerror or exc}"
        ) from exc


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a fifo"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a file"),
    )
    return next((name for is_kind, name in kinds if is_kind(mode)), "something else")


def _user(uid: int) -> str:
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
