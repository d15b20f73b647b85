"""What `--db` names is opened as a store only if it is one: a fifo, a file of notes, an empty
file (for a command that only reads) or a bad schema version is refused by name and the file is
left as it was; only a store loopdeck created or found to be its own is made private."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import stat
from pathlib import Path

import pytest
from conftest import HARNESS
from store_helpers import loopdeck

from loopdeck.store.base import StoreError
from loopdeck.store.opening import open_store

RUN = ("run", str(HARNESS), "--script", "note", "--json", "--headless")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def opened(db: Path, *, create: bool) -> None:
    async def go() -> None:
        store = await open_store(db, create=create)
        await store.close()

    asyncio.run(go())


@pytest.mark.parametrize("command", [("runs",), ("verify",), RUN], ids=["runs", "verify", "run"])
def test_a_fifo_is_refused_by_name_and_left_as_it_is(tmp_path, command) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    fifo.chmod(0o666)
    # In another process: a store opened on a fifo would wait for a writer forever.
    result = loopdeck(*command, db=fifo, timeout=30)
    assert result.returncode == 2
    assert f"{fifo}: not a regular file but a fifo" in result.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode) and mode(fifo) == 0o666


@pytest.mark.parametrize("command", [("runs",), RUN], ids=["runs", "run"])
def test_a_file_that_is_not_a_store_keeps_its_mode(tmp_path, cli, command) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hi\n")
    notes.chmod(0o644)
    code, _, err = cli(*command, "--db", str(notes))
    assert code == 2
    assert f"{notes}: not a loopdeck database (file is not a database)" in err
    assert mode(notes) == 0o644 and notes.read_text() == "hi\n"


@pytest.mark.parametrize("command", ["runs", "pending", "verify"])
def test_a_read_command_refuses_an_empty_file(tmp_path, cli, command) -> None:
    empty = tmp_path / "e.db"
    empty.touch()
    empty.chmod(0o644)
    code, _, err = cli(command, "--db", str(empty))
    assert code == 2 and f"{empty}: an empty file, not a loopdeck store" in err
    assert empty.stat().st_size == 0 and mode(empty) == 0o644


def test_a_read_command_refuses_a_database_with_no_tables(tmp_path) -> None:
    db = tmp_path / "blank.db"
    with contextlib.closing(sqlite3.connect(db)) as con:
        con.execute("PRAGMA user_version = 3")
    db.chmod(0o644)
    with pytest.raises(StoreError, match=r"not a loopdeck database \(it has no tables\)") as raised:
        opened(db, create=False)
    assert str(db) in str(raised.value)
    with contextlib.closing(sqlite3.connect(db)) as con:
        assert con.execute("SELECT name FROM sqlite_master").fetchall() == []
    assert mode(db) == 0o644


def test_a_command_that_creates_stores_still_creates_one_where_no_file_is(tmp_path) -> None:
    db = tmp_path / "new" / "s.db"
    opened(db, create=True)
    assert mode(db) == 0o600
    opened(db, create=False)


def test_a_store_with_a_schema_version_that_is_not_a_number_is_named(tmp_path, cli) -> None:
    db = tmp_path / "s.db"
    opened(db, create=True)
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        con.execute("UPDATE meta SET value = 'abc' WHERE key = 'schema_version'")
    expected = f"{db}: schema_version 'abc' is not a number: not a loopdeck store"
    with pytest.raises(StoreError, match=re.escape(expected)):
        opened(db, create=False)
    code, _, err = cli("runs", "--db", str(db))
    assert code == 2 and expected in err and "invalid literal" not in err
