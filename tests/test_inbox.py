"""The approvals inbox's data and decisions without a screen (`operator/inbox.py`): typed
entries read from the store for every run, decisions through `store/deciding.py`, and a
listing of a dead runner's requests that writes nothing; marking crashed runs is one
explicit call (`queries.mark_crashed_runners`), in its own transaction."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from loopdeck.operator import inbox as inbox_module
from loopdeck.operator.inbox import (
    BY,
    Inbox,
    PendingQuestion,
    PendingWrite,
    WaitingCount,
    read_entries,
)
from loopdeck.store import queries
from loopdeck.store.base import Store, StoreError
from loopdeck.store.liveness import process_started, this_host
from loopdeck.store.opening import open_store

NOW = datetime.now(UTC)


async def _run(store: Store, run_id: str, *, alive: bool) -> None:
    """A run waiting for the operator: its runner this process, or one silent on another host
    since the epoch (gone, as any reader can tell)."""
    pid, host = (os.getpid(), this_host()) if alive else (4242, "elsewhere")
    beat = time.time() if alive else 0.0
    await store.execute(
        "INSERT INTO runs (run_id, env, script, state, started_at, pid, host, pid_started,"
        " heartbeat_at) VALUES (?, 'shop', 'solve', 'awaiting_approval', ?, ?, ?, ?, ?)",
        (run_id, NOW.isoformat(), pid, host, process_started(pid) if alive else None, beat),
    )


async def _write(store: Store, run_id: str, call_id: str, expires_in_s: float) -> None:
    asked = datetime.now(UTC)  # not the module's NOW: the store refuses decisions once expired
    await store.execute(
        "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at, state)"
        " VALUES (?, ?, 'update_address', ?, ?, ?, 'pending')",
        (run_id, call_id, json.dumps({"to": "7 New St"}), asked.isoformat(),
         (asked + timedelta(seconds=expires_in_s)).isoformat()),
    )  # fmt: skip
    body = {"call_id": call_id, "rationale": "the customer moved", "plan_step": "3. change it"}
    await store.execute(
        "INSERT INTO events (run_id, seq, kind, at, body) SELECT ?, COALESCE(MAX(seq), 0) + 1,"
        " 'approval_requested', ?, ? FROM events WHERE run_id = ?",
        (run_id, asked.isoformat(), json.dumps(body), run_id),
    )


async def _question(store: Store, run_id: str, question_id: str) -> None:
    await store.execute(
        "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at, state)"
        " VALUES (?, ?, ?, ?, ?, ?, 'pending')",
        (run_id, question_id, queries.QUESTION, json.dumps({"question": "which address?"}),
         NOW.isoformat(), queries.QUESTION_NEVER_EXPIRES),
    )  # fmt: skip


@pytest.fixture
async def store(tmp_path: Path):
    opened = await open_store(tmp_path / "s.db")
    yield opened
    await opened.close()


async def test_the_entries_are_typed_writes_soonest_first_then_questions(store: Store) -> None:
    await _run(store, "r1", alive=True)
    await _run(store, "r2", alive=True)
    await _write(store, "r1", "late", expires_in_s=300)
    await _write(store, "r2", "soon", expires_in_s=30)
    await _question(store, "r1", "q1")
    inbox = Inbox()
    assert await inbox.refresh(store)
    soon, late, question = inbox.entries
    assert isinstance(soon, PendingWrite) and isinstance(late, PendingWrite)
    assert (soon.key, late.key) == ("r2/soon", "r1/late")
    assert soon.args == {"to": "7 New St"} and soon.env == "shop/solve"
    assert (soon.rationale, soon.plan_step) == ("the customer moved", "3. change it")
    assert isinstance(question, PendingQuestion)
    assert (question.key, question.question) == ("r1/q1", "which address?")
    assert question.tool == "ask_user" and question.plan_step == ""
    assert not await inbox.refresh(store)  # nothing committed since: nothing read


async def test_decisions_go_through_the_store_and_one_wins(store: Store) -> None:
    await _run(store, "r1", alive=True)
    await _write(store, "r1", "c1", expires_in_s=300)
    await _write(store, "r1", "c2", expires_in_s=300)
    await _question(store, "r1", "q1")
    inbox = Inbox(store=store)
    c1, c2, q1 = await read_entries(store)
    assert isinstance(c1, PendingWrite) and isinstance(c2, PendingWrite)
    assert isinstance(q1, PendingQuestion)
    assert await inbox.decide(c1, approved=True)
    assert not await inbox.decide(c1, approved=False, reason="too late")  # already decided
    assert await inbox.decide(c2, approved=False)
    assert await inbox.answer(q1, "the new one")
    rows = await store.fetchall(
        "SELECT call_id, state, decided_by, reason FROM approvals ORDER BY call_id"
    )
    assert [tuple(row) for row in rows] == [
        ("c1", "approved", BY, ""),
        ("c2", "rejected", BY, "rejected by the operator"),
        ("q1", "answered", BY, "the new one"),
    ]
    inbox.entries = [c1, c2, q1]
    inbox.drop(c2)
    assert inbox.entries == [c1, q1]


async def test_a_decision_without_a_store_is_an_error_not_a_silence() -> None:
    write = PendingWrite(run_id="r", call_id="c", tool="t", args={}, env="e/s", expires=NOW)
    with pytest.raises(StoreError, match="not following a store"):
        await Inbox().decide(write, approved=True)


async def test_listing_a_dead_runners_requests_writes_nothing_the_explicit_mark_does(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _run(store, "dead", alive=False)
    await _write(store, "dead", "c1", expires_in_s=300)
    await _question(store, "dead", "q1")
    writes: list[str] = []

    def no_write(*args: Any, **kwargs: Any) -> Any:
        writes.append(str(args[0] if args else kwargs))
        raise AssertionError(f"a reader wrote: {writes[-1]}")

    with monkeypatch.context() as patched:
        patched.setattr(store, "transaction", no_write)
        patched.setattr(store, "execute", no_write)
        assert [p["call_id"] for p in await queries.pending_approvals(store)] == ["c1"]
        assert [q["question_id"] for q in await queries.pending_questions(store)] == ["q1"]
        assert [r["state"] for r in await queries.list_runs(store)] == ["awaiting_approval"]
        assert [e.key for e in await read_entries(store)] == ["dead/c1", "dead/q1"]
    assert writes == []
    assert await queries.mark_crashed_runners(store) == ["dead"]
    row = await queries.run_row(store, "dead")
    assert row is not None and (row["state"], row["stop_reason"]) == ("stopped", "crashed")
    assert await read_entries(store) == []  # its requests withdrawn with the mark
    assert await queries.mark_crashed_runners(store) == []  # marked once


async def test_a_decision_in_the_inbox_is_of_the_asking_it_listed(store: Store) -> None:
    """The run asked again after the inbox listed the write: its decision is refused (the
    new asking stays for the operator to see), never carried onto the new one."""
    await _run(store, "r1", alive=True)
    await _write(store, "r1", "c1", expires_in_s=300)
    [c1] = await read_entries(store)
    again = NOW + timedelta(seconds=5)
    await store.execute(
        "UPDATE approvals SET requested_at = ?, expires_at = ? WHERE call_id = 'c1'",
        (again.isoformat(), (again + timedelta(seconds=300)).isoformat()),
    )
    assert not await Inbox(store=store).decide(c1, approved=True)
    rows = await store.fetchall("SELECT state FROM approvals WHERE call_id = 'c1'")
    assert rows[0][0] == "pending"


async def test_the_count_of_other_runs_looks_for_dead_runners_beside_its_read(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a second the count looks for runs whose runner died, as the fleet does: beside its
    read of what waits, not before it (a request is counted after one read, not two)."""
    await _run(store, "live", alive=True)
    await _write(store, "live", "c1", expires_in_s=300)
    read_begun = asyncio.Event()
    reading = inbox_module.read_entries

    async def read(store: Store) -> list[Any]:
        read_begun.set()
        return await reading(store)

    looked: list[bool] = []

    async def look(store: Store) -> list[str]:
        # Only a guard against a hang: on the old code the read never begins while this waits.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(read_begun.wait(), 30)
        looked.append(read_begun.is_set())
        return []

    monkeypatch.setattr(inbox_module, "read_entries", read)
    monkeypatch.setattr(queries, "mark_crashed_runners", look)
    count = WaitingCount()
    assert await count.refresh(store)
    assert looked == [True] and count.by_run == {"live": 1}


async def test_what_the_count_marks_crashed_it_stops_counting_in_the_same_refresh(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look marks the dead runner once the read has counted its request: the same refresh
    reads again and counts it no more."""
    await _run(store, "dead", alive=False)
    await _write(store, "dead", "c1", expires_in_s=300)
    read_done = asyncio.Event()
    reading, marking = inbox_module.read_entries, queries.mark_crashed_runners

    async def read(store: Store) -> list[Any]:
        found = await reading(store)
        read_done.set()
        return found

    async def look(store: Store) -> list[str]:
        with contextlib.suppress(TimeoutError):  # a guard against a hang only
            await asyncio.wait_for(read_done.wait(), 30)
        return await marking(store)

    monkeypatch.setattr(inbox_module, "read_entries", read)
    monkeypatch.setattr(queries, "mark_crashed_runners", look)
    count = WaitingCount()
    assert await count.refresh(store)
    assert count.by_run == {}
    row = await queries.run_row(store, "dead")
    assert row is not None and row["stop_reason"] == "crashed"
