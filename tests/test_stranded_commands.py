"""Commands to a run stranded on its lost worker (its lease lapsed, and it cannot move: its
env's state lived in that worker): each says what will happen. A message or a resume is
refused by name (exit 2, nothing recorded): nothing would hear it. A cancel or a kill is
recorded and said as what becomes of the run: the next worker ends it crashed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from test_worker_commands import left_unmovable
from worker_helpers import lease_state, stored, with_a_worker

from loopdeck.core.events import RunStopped
from loopdeck.store import leases
from loopdeck.store.opening import open_store

WHY = "its env (OrderSupport) keeps its state in its worker's memory"


def _stranded(db: Path) -> None:
    async def left() -> None:
        store = await open_store(db)
        try:
            epoch = await left_unmovable(store, approve="wait", cut_after="approval_requested")
            await leases.pin(store, "r1", epoch, WHY)
        finally:
            await store.close()

    asyncio.run(left())


def _commands(db: Path) -> list[str]:
    async def read() -> list[str]:
        store = await open_store(db)
        try:
            rows = await store.fetchall("SELECT command FROM commands WHERE run_id = 'r1'")
            return [str(row[0]).split(" ", 1)[0] for row in rows]
        finally:
            await store.close()

    return asyncio.run(read())


def test_a_message_or_a_resume_to_a_stranded_run_is_refused_by_name(
    tmp_path: Path, cli: Any
) -> None:
    db = tmp_path / "s.db"
    _stranded(db)
    for argv, what in ((["message", "r1", "look again"], "message to r1"),
                       (["resume", "r1"], "resume of r1")):  # fmt: skip
        code, said, err = cli(*argv, "--db", str(db))
        assert code == 2, (argv, err)
        assert said is None and "sent" not in err, err
        assert f"it cannot go on: {WHY}): nothing will act on your {what}" in err, err
        assert "the next worker to take it up ends it crashed" in err, err
    assert _commands(db) == []


def test_a_cancel_or_a_kill_of_a_stranded_run_says_the_next_worker_ends_it_crashed(
    tmp_path: Path, cli: Any
) -> None:
    db = tmp_path / "s.db"
    _stranded(db)
    code, said, err = cli("cancel", "r1", "--json", "--db", str(db))
    assert code == 0 and said is not None, err
    assert said["command"] == "cancel" and said["ends"] == "crashed", said
    message = str(said["message"])
    assert "sent" not in message and f"it cannot go on ({WHY})" in message, message
    assert "the next worker to take it up ends it crashed" in message, message
    code, _, err = cli("cancel", "r1", "--now", "--db", str(db))
    assert code == 0, err
    assert _commands(db) == ["cancel", "kill"]  # its own worker, back first, takes them

    async def ended_as_said() -> RunStopped:
        store = await open_store(db)
        try:

            async def ended() -> bool:
                return await lease_state(store, "r1") == "ended"

            await with_a_worker(db, ended)
            stop = (await stored(store, "r1"))[-1]
            assert isinstance(stop, RunStopped)
            return stop
        finally:
            await store.close()

    assert asyncio.run(ended_as_said()).stop_reason.value == "crashed"


def test_a_message_or_a_cancel_to_a_run_whose_runner_is_gone_is_refused_and_it_is_crashed(
    tmp_path: Path, cli: Any
) -> None:
    """Not on a worker, its runner's process gone: nothing would hear either (they were
    recorded and said sent); refused as a decision is, the run marked crashed."""
    from test_store_locks import RUN, _dead_pid, _stored

    db = tmp_path / "s.db"
    asyncio.run(_stored(db, _dead_pid()))
    code, _, err = cli("message", RUN, "look again", "--db", str(db))
    assert code == 2, err
    assert f"run {RUN}'s runner is gone" in err and "nothing will act on your message" in err
    code, _, err = cli("cancel", RUN, "--db", str(db))
    assert code == 1 and "already ended (crashed): nothing to cancel" in err, err
    code, runs, _ = cli("runs", "--json", "--db", str(db))
    assert runs is not None and [run["stop_reason"] for run in runs] == ["crashed"]


async def test_the_inboxs_message_to_a_stranded_run_is_refused_by_name(tmp_path: Path) -> None:
    """The console's inbox says it as `loopdeck message` does (its `m`: "message not sent")."""
    import pytest

    from loopdeck.operator.entries import PendingQuestion
    from loopdeck.operator.inbox import Inbox
    from loopdeck.store.base import StoreError

    db = tmp_path / "s.db"
    await asyncio.to_thread(_stranded, db)
    store = await open_store(db)
    try:
        entry = PendingQuestion(run_id="r1", call_id="q1", question="which?", env="orders")
        with pytest.raises(StoreError, match="nothing will act on your message to r1"):
            await Inbox(store=store).message(entry, "look again")
        assert await store.fetchall("SELECT 1 FROM commands") == []
    finally:
        await store.close()


async def test_an_attached_consoles_message_and_stop_to_a_stranded_run_say_what_happens(
    tmp_path: Path,
) -> None:
    """`m` is refused by name as `loopdeck message` refuses it, nothing recorded (it was sent
    unchecked and said sent); `s` is recorded and said as what becomes of the run, never
    "stopping after the current tools"."""
    from console_helpers import notices, wait_until
    from test_console_messages import _type_message

    from loopdeck.operator.store_link import StoreLink
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp
    from loopdeck.tui.dialogs import ApprovalDialog
    from loopdeck.tui.run_screen import RunScreen

    db = tmp_path / "s.db"
    await asyncio.to_thread(_stranded, db)
    link = StoreLink(db, "r1")
    app = LoopdeckApp(ConsoleStart.for_link(link))

    def said(words: str) -> list[str]:
        return [t for t in notices(app) if words in t]

    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape")  # its write decided later
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
        await _type_message(pilot, app, "look again")
        await wait_until(pilot, lambda: bool(said("message not sent")))
        [refused] = said("message not sent")
        assert "nothing will act on your message to r1" in refused, refused
        assert refused.endswith("the model does not hear it"), refused
        assert not said("message sent")
        await pilot.press("s")
        await wait_until(pilot, lambda: bool(said("stop recorded")))
        [stopped] = said("stop recorded")
        assert f"it cannot go on ({WHY})" in stopped, stopped
        assert "the next worker to take it up ends it crashed" in stopped, stopped
        assert not said("stopping after the current tools")
    assert await asyncio.to_thread(_commands, db) == ["cancel"]
