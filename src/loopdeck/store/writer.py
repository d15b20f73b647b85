"""Appending a run's events in batches; `flush()` is the acknowledgement the runtime awaits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any

from loopdeck.core.events import EventBase
from loopdeck.store.database import Store, StoreError

BATCH_INTERVAL_S = 0.05
BATCH_MAX = 512


class EventWriter:
    """A bus subscriber that queues events and commits them in batches, in order."""

    def __init__(self, store: Store, *, approve_mode: str = "") -> None:
        self.store = store
        self.approve_mode = approve_mode
        self.pid = __import__("os").getpid()
        self.host = socket.gethostname()
        self.acknowledged_seq = 0
        self.error: StoreError | None = None
        self._queue: list[EventBase] = []
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def __call__(self, event: EventBase) -> None:
        self._queue.append(event)
        if len(self._queue) >= BATCH_MAX:
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="loopdeck-event-writer")

    async def _loop(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), BATCH_INTERVAL_S)
            self._wake.clear()
            try:
                await self.flush()
            except StoreError as exc:
                self.error = exc  # kept, retried next tick; nothing queued is dropped

    async def flush(self) -> None:
        """Commit everything queued so far; returns once it is durable."""
        async with self._lock:
            if not self._queue:
                return
            batch, self._queue = self._queue, []
            try:
                await self._commit(batch)
            except (sqlite3.Error, StoreError) as exc:
                self._queue = batch + self._queue
                raise exc if isinstance(exc, StoreError) else self.store.explain(exc) from exc
            except BaseException:
                self._queue = batch + self._queue
                raise
            self.acknowledged_seq = batch[-1].seq
            self.error = None

    async def close(self) -> None:
        # Never cancel the loop: a commit cut short by a cancellation would lose its batch.
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        await self.flush()

    def spill(self) -> Path | None:
        """Write what could not be committed beside the store, so nothing recorded is lost."""
        if not self._queue:
            return None
        run_id = self._queue[0].run_id
        path = self.store.path.with_name(f"{self.store.path.name}.unsaved-{run_id}.jsonl")
        with path.open("a", encoding="utf-8") as out:
            for event in self._queue:
                out.write(event.model_dump_json() + "\n")
        self._queue = []
        return path

    async def _commit(self, batch: list[EventBase]) -> None:
        async with self.store.lock:
            await self._commit_locked(batch)

    async def _commit_locked(self, batch: list[EventBase]) -> None:
        db = self.store.db
        await db.execute("BEGIN IMMEDIATE")
        try:
            await db.executemany(
                "INSERT OR IGNORE INTO events (run_id, seq, kind, at, body) VALUES (?, ?, ?, ?, ?)",
                [
                    (e.run_id, e.seq, getattr(e, "kind", ""), e.at.isoformat(), e.model_dump_json())
                    for e in batch
                ],
            )
            # Run-row fields only keep their last value: apply the last event of each kind.
            last: dict[str, EventBase] = {}
            for event in batch:
                kind = getattr(event, "kind", "")
                if kind in ("state_changed", "budget_updated"):
                    last[kind] = event
                else:
                    await self._apply(event)
            for event in last.values():
                await self._apply(event)
            await db.execute("COMMIT")
        except BaseException:
            await db.execute("ROLLBACK")
            raise

    async def _apply(self, e: Any) -> None:
        db = self.store.db
        kind = e.kind
        if kind == "run_started":
            await db.execute(
                "INSERT OR REPLACE INTO runs (run_id, env, script, model, mode, goal, state,"
                " started_at, pid, host, heartbeat_at, approve_mode)"
                " VALUES (?, ?, ?, ?, ?, ?, 'ready', ?, ?, ?, ?, ?)",
                (e.run_id, e.env, e.script, e.model, e.mode, e.goal, e.at.isoformat(),
                 self.pid, self.host, time.time(), self.approve_mode),
            )  # fmt: skip
        elif kind == "state_changed":
            await db.execute(
                "UPDATE runs SET state = ? WHERE run_id = ?", (e.target.value, e.run_id)
            )
        elif kind == "budget_updated":
            tokens = int(e.usage["tokens"][0])
            cost = None if e.cost_unknown_calls else float(e.usage["cost_usd"][0])
            await db.execute(
                "UPDATE runs SET tokens = ?, cost_usd = ?, cost_unknown_calls = ? WHERE run_id = ?",
                (tokens, cost, e.cost_unknown_calls, e.run_id),
            )
        elif kind == "run_stopped":
            await db.execute(
                "UPDATE runs SET state = ?, stop_reason = ?, detail = ?, ended_at = ?"
                " WHERE run_id = ?",
                (e.state.value, e.stop_reason.value, e.detail, e.at.isoformat(), e.run_id),
            )
        elif kind == "approval_requested":
            await db.execute(
                "INSERT OR REPLACE INTO approvals (run_id, call_id, tool, args, requested_at,"
                " expires_at, state) VALUES (?, ?, ?, ?, ?, ?, 'pending')",
                (e.run_id, e.call_id, e.tool, json.dumps(e.args), e.requested_at.isoformat(),
                 e.expires_at.isoformat()),
            )  # fmt: skip
        elif kind == "approval_decided":
            await db.execute(
                "UPDATE approvals SET state = ?, decided_by = ?, reason = ?, decided_at = ?"
                " WHERE run_id = ? AND call_id = ? AND state = 'pending'",
                ("approved" if e.approved else "rejected", e.by, e.reason, e.at.isoformat(),
                 e.run_id, e.call_id),
            )  # fmt: skip
        elif kind == "approval_withdrawn":
            await db.execute(
                "UPDATE approvals SET state = 'withdrawn' WHERE run_id = ? AND call_id = ?"
                " AND state = 'pending'",
                (e.run_id, e.call_id),
            )
        elif kind == "tool_finished":
            await db.execute(
                "UPDATE approvals SET outcome = ? WHERE run_id = ? AND call_id = ?",
                (e.status.value, e.run_id, e.call_id),
            )
