"""A cancel or a kill sent to a runner alive on this host whose heartbeat is silent (the store
may refuse its login, or be out of its reach) is recorded, and said as what will happen: it
takes it once it reaches the store again. A decision there is refused (it would be taken
late); a stop loses nothing by waiting, and refusing it left the run going on."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from test_stranded_commands import _commands

from loopdeck.store.liveness import process_started, this_host
from loopdeck.store.opening import open_store

SILENT_FOR_S = 600.0


def _silent_run(db: Path) -> None:
    """A run of this process (alive), live, its heartbeat silent for ten minutes."""

    async def stored() -> None:
        store = await open_store(db)
        try:
            pid = os.getpid()
            await store.execute(
                "INSERT INTO runs (run_id, env, script, state, started_at, pid, host,"
                " pid_started, heartbeat_at) VALUES ('r1', 'e', 's', 'deciding', ?, ?, ?, ?, ?)",
                (datetime.now(UTC).isoformat(), pid, this_host(), process_started(pid),
                 time.time() - SILENT_FOR_S),
            )  # fmt: skip
        finally:
            await store.close()

    asyncio.run(stored())


def test_a_stop_to_a_silent_runner_is_recorded_and_said_as_taken_once_it_reaches_the_store(
    tmp_path: Path, cli: Any
) -> None:
    db = tmp_path / "s.db"
    _silent_run(db)
    code, said, err = cli("cancel", "r1", "--json", "--db", str(db))
    assert code == 0 and said is not None, err
    assert said["command"] == "cancel" and said["ends"] is None, said
    message = " ".join(str(said["message"]).split())
    assert message.startswith("r1: cancel recorded; its runner (pid "), message
    assert "has not reached the store for" in message, message
    assert "it takes the stop once it does" in message, message
    code, _, err = cli("cancel", "r1", "--now", "--db", str(db))
    assert code == 0, err
    assert _commands(db) == ["cancel", "kill"]


def test_a_message_to_a_silent_runner_is_still_refused(tmp_path: Path, cli: Any) -> None:
    db = tmp_path / "s.db"
    _silent_run(db)
    code, said, err = cli("message", "r1", "look again", "--db", str(db))
    assert code == 2 and said is None, err
    assert "nothing was recorded" in " ".join(err.split()), err
    assert _commands(db) == []


def test_a_stop_to_a_parked_run_is_not_said_as_a_silent_runners(tmp_path: Path, cli: Any) -> None:
    """A parked run's row keeps its last worker's pid and host, and no heartbeat beats for it:
    no runner is silent, a free worker takes the stop up."""
    db = tmp_path / "s.db"
    _silent_run(db)

    async def parked() -> None:
        store = await open_store(db)
        try:
            await store.execute(
                "INSERT INTO leases (run_id, options, state, epoch, submitted_at, expires_at)"
                " VALUES ('r1', '{}', 'parked', 1, ?, ?)",
                (time.time() - 700, time.time() + 3600),
            )
        finally:
            await store.close()

    asyncio.run(parked())
    code, said, err = cli("cancel", "r1", "--json", "--db", str(db))
    assert code == 0 and said is not None, err
    assert "silent" not in str(said), said
    assert _commands(db) == ["cancel"]
