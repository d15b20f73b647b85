"""A store loopdeck opens is private to its owner: the file, its -wal and -shm 0600, its data
folder 0700; a file it cannot make so is refused by name, and left as it was."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
from pathlib import Path

import pytest
from conftest import HARNESS

from loopdeck.store.base import StoreError
from loopdeck.store.files import private_file, private_folder
from loopdeck.store.opening import open_store


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def opened(location: Path | None) -> None:
    async def go() -> None:
        store = await open_store(location)
        await store.close()

    asyncio.run(go())


def test_a_world_readable_empty_file_becomes_a_private_store(tmp_path, cli) -> None:
    db = tmp_path / "x.db"
    db.touch()
    db.chmod(0o644)
    code, payload, err = cli("run", str(HARNESS), "--script", "note", "--json", "--db", str(db))
    assert code == 0, err
    assert mode(db) == 0o600
    with contextlib.closing(sqlite3.connect(db)) as conn:
        ((events,),) = conn.execute("SELECT count(*) FROM events").fetchall()
    assert payload is not None and events > 0


def test_an_open_world_readable_store_and_its_wal_and_shm_are_tightened(tmp_path) -> None:
    db = tmp_path / "s.db"
    opened(db)
    side = [db.with_name(db.name + suffix) for suffix in ("-wal", "-shm")]
    # Another connection keeps the WAL and its index there while loopdeck opens the store.
    with contextlib.closing(sqlite3.connect(db)) as other:
        other.execute("SELECT count(*) FROM runs").fetchall()
        for path in (db, *side):
            path.chmod(0o644)
        opened(db)
        assert [mode(path) for path in (db, *side)] == [0o600] * 3


def test_the_data_folder_is_made_private(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("LOOPDECK_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    folder = tmp_path / "share" / "loopdeck"
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    opened(None)
    assert mode(folder) == 0o700 and mode(folder / "loopdeck.db") == 0o600


def test_a_folder_the_user_chose_is_left_as_it_is_and_a_new_one_is_private(tmp_path) -> None:
    tmp_path.chmod(0o755)
    opened(tmp_path / "mine.db")
    assert mode(tmp_path) == 0o755
    opened(tmp_path / "new" / "mine.db")
    assert mode(tmp_path / "new") == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user takes root")
def test_a_store_of_another_user_is_refused_by_name(tmp_path) -> None:
    db = tmp_path / "theirs.db"
    db.touch()
    db.chmod(0o644)
    os.chown(db, 65534, -1)  # nobody
    with pytest.raises(StoreError, match=r"belongs to .*uid 65534") as raised:
        opened(db)
    assert str(db) in str(raised.value)
    assert mode(db) == 0o644 and db.stat().st_uid == 65534


def test_a_store_whose_mode_cannot_change_is_refused_by_name(tmp_path, monkeypatch) -> None:
    db = tmp_path / "fixed.db"
    db.touch()
    db.chmod(0o644)

    def refuse(path: object, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(os, "chmod", refuse)
    with pytest.raises(StoreError, match=r"open to other users .*0644.* cannot be made private"):
        opened(db)


def test_the_helpers_for_spills_tighten_and_make(tmp_path) -> None:
    spill = tmp_path / "unsaved.jsonl"
    private_file(spill)  # not there yet: nothing to do
    spill.touch()
    spill.chmod(0o664)
    private_file(spill)
    assert mode(spill) == 0o600
    folder = tmp_path / "data"
    folder.mkdir()
    folder.chmod(0o755)
    assert private_folder(folder) == folder and mode(folder) == 0o700
    assert mode(private_folder(tmp_path / "made" / "here")) == 0o700
