"""Where a run's events wait while its store cannot take them: a spill file outside the
store's folder, so a full disk under the store does not also swallow the spill.

The first folder that takes the whole file is used: the user data dir's `spill` folder, else
`$XDG_RUNTIME_DIR/loopdeck-spill`, else the temp dir's `loopdeck-spill-UID` (each 0700, files
0600, through `store/files.py`: a folder of another user's is passed over). The file's first
line names the store (`store_key`), so its events are only ever brought back into that store
(`store/replay.py`). While its writer lives it holds an exclusive `flock` on the file: a reader
never replays what a live runner still writes."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loopdeck.store.base import Location, StoreError, data_folder, is_postgres, shown_location
from loopdeck.store.files import private_file, private_folder

FORMAT = "loopdeck-spill"


def spill_folders() -> list[Path]:
    folders = [data_folder() / "spill"]
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        folders.append(Path(runtime_dir) / "loopdeck-spill")
    folders.append(Path(tempfile.gettempdir()) / f"loopdeck-spill-{os.getuid()}")
    return folders


def store_key(location: Location) -> str:
    """A store as a spill file names it: the SQLite file's resolved path, or the URL without
    its password."""
    if is_postgres(location):
        return shown_location(location)
    return str(Path(location).resolve())


class Spill:
    """One run's spill file: rewritten whole with every event not yet in the store, held
    (flock) until the events are committed after all (`release(remove=True)`) or the writer
    lets go."""

    def __init__(self, location: Location, header: dict[str, Any]) -> None:
        self.header = {"format": FORMAT, "store": store_key(location), **header}
        self.name = f"unsaved-{header['run_id']}.jsonl"
        self.path: Path | None = None
        self.problems: list[str] = []
        self._fd: int | None = None

    def write(self, lines: list[str]) -> Path | None:
        """The header and `lines`, in the first folder that takes them all; None: none did
        (`problems` says why)."""
        self.problems = []
        text = (json.dumps(self.header) + "\n" + "".join(line + "\n" for line in lines)).encode()
        if self._fd is not None and self._write_all(self._fd, text, self.path):
            return self.path
        for folder in spill_folders():
            path = folder / self.name
            if path == self.path:
                continue  # just failed above
            try:
                private_folder(folder)  # another user's folder is refused, never written
                private_file(path)
                fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            except StoreError as exc:
                self.problems.append(str(exc))
                continue
            except OSError as exc:
                self.problems.append(f"{folder}: {exc.strerror or exc}")
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                self.problems.append(f"{path}: held by another process")
                continue
            if self._write_all(fd, text, path):
                self.release(remove=True)  # the one that failed before, if any
                self._fd, self.path = fd, path
                return path
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a partial copy would only mislead
        self.release(remove=True)
        return None

    def _write_all(self, fd: int, text: bytes, where: Path | None) -> bool:
        try:
            os.ftruncate(fd, 0)
            view = memoryview(text)
            offset = 0
            while offset < len(view):
                offset += os.pwrite(fd, view[offset:], offset)
            os.fsync(fd)
            return True
        except OSError as exc:
            self.problems.append(f"{where}: {exc.strerror or exc}")
            return False

    def release(self, *, remove: bool) -> None:
        """Let go of the file (a later process may replay it), or remove it as well: its
        events are in the store after all."""
        if self._fd is None:
            return
        if remove and self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        os.close(self._fd)
        self._fd = None
        if remove:
            self.path = None


def spills_of(location: Location) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Spill files naming this store, with their headers (unreadable files are skipped:
    they name no store)."""
    key = store_key(location)
    for folder in spill_folders():
        if not _mine(folder):
            continue  # missing, or another user's: nothing in it is brought into a store
        try:
            paths = sorted(folder.glob("unsaved-*.jsonl"))
        except OSError:
            continue
        for path in paths:
            if not _mine(path):
                continue
            try:
                with path.open(encoding="utf-8") as file:
                    header = json.loads(file.readline() or "null")
            except (OSError, ValueError):
                continue
            if (
                isinstance(header, dict)
                and header.get("format") == FORMAT
                and (header.get("store") == key)
            ):
                yield path, header


def _mine(path: Path) -> bool:
    """Owned by this user and closed to others: a spill another user could have written is
    never replayed (the temp dir's folder can be made by anyone)."""
    try:
        found = path.lstat()
    except OSError:
        return False
    return found.st_uid == os.geteuid() and not found.st_mode & 0o022
