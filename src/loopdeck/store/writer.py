"""Appending a run's events in batches; `flush()` is the acknowledgement the runtime awaits.

While the store cannot take writes (`StoreUnavailable`: unreachable, locked, disk full) the
writer is in an outage: the events stay queued in order, are spilled outside the store's
folder (`store/spill.py`), and the commit is tried again with a bounded backoff; the runtime
holds meanwhile (`Journal.outage`, `recovered()`). The first commit that lands writes the
queue in order and ends the outage."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loopdeck.core.events import EventBase
from loopdeck.core.recording import JournalOutage
from loopdeck.core.timeouts import bounded
from loopdeck.store.base import Store, StoreError, StoreUnavailable, Tx
from loopdeck.store.liveness import process_started, this_host
from loopdeck.store.queries import CRASH_DETECTOR, QUESTION_NEVER_EXPIRES
from loopdeck.store.spill import Spill

BATCH_INTERVAL_S = 0.05
BATCH_MAX = 512
# While the store cannot take writes: the next try after 0.1 s, doubling up to 2 s.
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 2.0
# How long `close` keeps trying a store that cannot take writes before it gives up (spill).
CLOSE_RETRY_S = 10.0
# A call asked again (its receipt expired) replaces its row: pending again, undecided.
ASKED_AGAIN = (
    "ON CONFLICT (run_id, call_id) DO UPDATE SET tool = excluded.tool, args = excluded.args,"
    " requested_at = excluded.requested_at, expires_at = excluded.expires_at, state = 'pending',"
    " decided_by = NULL, reason = NULL, decided_at = NULL, outcome = NULL"
)


# Events that change the runs or approvals tables (the rest are only appended): the last of
# each batch for the first set, every one for the second; a tool_finished event only when its
# call asked for approval (its outcome goes on the approval's row).
LAST_VALUE_KINDS = frozenset({"state_changed", "budget_updated"})
ROW_KINDS = frozenset(
    {"run_started", "run_stopped", "approval_requested", "approval_decided", "question_asked",
     "question_answered", "approval_withdrawn"}
)  # fmt: skip


class EventWriter:
    """A bus subscriber that queues events and commits them in batches, in order."""

    def __init__(self, store: Store, *, approve_mode: str = "") -> None:
        self.store = store
        self.approve_mode = approve_mode
        self.pid = os.getpid()
        self.pid_started = process_started(self.pid)
        self.host = this_host()
        self.acknowledged_seq = 0
        self.error: StoreError | None = None
        # Told when a reader had marked this live run crashed and the writer undid it.
        self.on_correction: Callable[[str], None] | None = None
        # Told when an outage ended (the runner brings back other processes' spills then).
        self.on_recovery: Callable[[], None] | None = None
        self._state = "ready"
        self._stopped = False
        # Each event with its row, serialized as it is published: the next batch is made
        # while the previous one is being inserted on the store's thread. None: serializing
        # failed, and is tried again (and reported) when the batch is committed.
        self._queue: list[tuple[EventBase, EventRow | None]] = []
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        # Calls that asked for approval: only their results touch the approvals table, so a
        # read-only runaway's batch is one INSERT, not one statement per event.
        self._asked: set[str] = set()
        # An outage: the store cannot take writes now; the runtime holds until it ends.
        self.outage: JournalOutage | None = None
        self._available = asyncio.Event()
        self._available.set()
        self._spill: Spill | None = None
        self._spilled_through = 0  # the last seq the spill file holds
        self.close_retry_s = CLOSE_RETRY_S

    def __call__(self, event: EventBase) -> None:
        try:
            row: EventRow | None = event_row(event)
        except Exception:  # never the publisher's problem: the commit reports it
            row = None
        self._queue.append((event, row))
        if len(self._queue) >= BATCH_MAX and self.outage is None:  # an outage keeps its pace
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="loopdeck-event-writer")

    async def _loop(self) -> None:
        wait = BATCH_INTERVAL_S
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await bounded(self._wake.wait(), wait)
            self._wake.clear()
            try:
                await self.flush()
                wait = BATCH_INTERVAL_S
            except StoreError as exc:
                self.error = exc  # kept, retried; nothing queued is dropped
                if self.outage is not None:
                    wait = RETRY_FIRST_S if wait < RETRY_FIRST_S else min(wait * 2, RETRY_MAX_S)

    async def recovered(self) -> None:
        """Returns once the store takes writes again (at once when it does)."""
        await self._available.wait()

    async def flush(self) -> None:
        """Commit everything queued so far; returns once it is durable. Any failure is a
        StoreError, and what was not committed stays queued (for the next try or the spill)."""
        async with self._lock:
            if not self._queue:
                return
            batch, self._queue = self._queue, []
            try:
                await self._commit(batch)
            except StoreUnavailable as exc:
                self._queue = batch + self._queue
                self._enter_outage(exc)
                raise
            except StoreError:
                self._queue = batch + self._queue
                raise
            except Exception as exc:  # anything else still leaves the events safe in the queue
                self._queue = batch + self._queue
                raise StoreError(
                    f"{self.store.path}: events could not be written ({type(exc).__name__}: {exc})"
                ) from exc
            except BaseException:
                self._queue = batch + self._queue
                raise
            self.acknowledged_seq = batch[-1][0].seq
            self.error = None
            if self.outage is not None:
                self._end_outage()

    def _enter_outage(self, exc: StoreUnavailable) -> None:
        """The store cannot take writes: say so (cause, since, last error) and spill."""
        since = self.outage.since if self.outage is not None else datetime.now(UTC)
        spilled = self._spill_queue()
        self.outage = JournalOutage(
            cause=exc.cause,
            since=since,
            detail=str(exc),
            spill=None if spilled is None else str(spilled),
        )
        self._available.clear()

    def _end_outage(self) -> None:
        self.outage = None
        self._available.set()
        if self.on_recovery is not None:
            self.on_recovery()
        if self._spill is not None:
            self._spill.release(remove=True)  # everything it held is committed now
            self._spilled_through = 0

    def _spill_queue(self) -> Path | None:
        """The spill file holds every queued event (rewritten when more came)."""
        if not self._queue:
            return None
        if self._spill is None:
            self._spill = Spill(
                self.store.path,
                {"run_id": self._queue[0][0].run_id, "pid": self.pid, "host": self.host,
                 "pid_started": self.pid_started, "approve_mode": self.approve_mode},
            )  # fmt: skip
        last = self._queue[-1][0].seq
        if self._spill.path is not None and last == self._spilled_through:
            return self._spill.path
        lines = [row[4] if row is not None else event_json(event) for event, row in self._queue]
        path = self._spill.write(lines)
        self._spilled_through = last if path is not None else 0
        return path

    async def close(self) -> None:
        """Commit what is left; a store that cannot take writes is tried again for up to
        `close_retry_s`, then the StoreUnavailable goes to the caller (who spills)."""
        # Never cancel the loop: a commit cut short by a cancellation would lose its batch.
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        give_up = time.monotonic() + self.close_retry_s
        wait = RETRY_FIRST_S
        while True:
            try:
                await self.flush()
                return
            except StoreUnavailable:
                if time.monotonic() + wait > give_up:
                    raise
            await asyncio.sleep(wait)
            wait = min(wait * 2, RETRY_MAX_S)

    def spill(self) -> Path | None:
        """What could not be committed, in the spill file (outside the store's folder), let go
        of so that the next loopdeck process to open the store brings it back. None: nothing
        was left, or nowhere could take it (`spill_problems` says why)."""
        if not self._queue:
            return None
        path = self._spill_queue()
        if self._spill is not None:
            self._spill.release(remove=False)
        if path is not None:
            self._queue = []
        return path

    @property
    def spill_problems(self) -> list[str]:
        return [] if self._spill is None else list(self._spill.problems)

    def resume_from(self, state: str | None, asked: set[str]) -> None:
        """A writer bringing back another process's events (`store/replay.py`) starts where
        the store's record of the run is: its last state, the calls that asked for approval."""
        self._state = state or self._state
        self._asked |= asked

    async def write_back(self, events: list[EventBase]) -> None:
        """Events made by another process, committed as that process would have, in one
        transaction."""
        await self._commit([(event, None) for event in events])

    async def _commit(self, batch: list[tuple[EventBase, EventRow | None]]) -> None:
        run_id = batch[0][0].run_id
        async with self.store.transaction(run_id) as tx:
            await self._undo_a_false_crash(tx, run_id)
            if self.outage is not None:  # the commit that failed may have landed all the same
                batch = await _not_stored(tx, run_id, batch)
                if not batch:
                    return
            # A plain INSERT: no reader's row can sit at a runner's sequence number any more,
            # and a clash would be a bug to report, never an event to drop.
            await tx.executemany(
                "INSERT INTO events (run_id, seq, kind, at, body) VALUES (?, ?, ?, ?, ?)",
                [row or event_row(event) for event, row in batch],
            )
            # Run-row fields only keep their last value: apply the last event of each kind.
            last: dict[str, EventBase] = {}
            for event, _ in batch:
                kind = getattr(event, "kind", "")
                if kind in LAST_VALUE_KINDS:
                    last[kind] = event
                elif kind in ROW_KINDS or (
                    kind == "tool_finished" and getattr(event, "call_id", "") in self._asked
                ):
                    await self._apply(tx, event)
            for event in last.values():
                await self._apply(tx, event)

    async def _undo_a_false_crash(self, tx: Tx, run_id: str) -> None:
        """A reader marked this run crashed while its runner (this process) is alive: the
        runner's record wins. The reader's stop event goes, the row and the approvals the
        reader withdrew come back, and the correction is recorded as an event."""
        if self._stopped:
            return
        rows = await tx.fetchall("SELECT stop_reason, detail FROM runs WHERE run_id = ?", (run_id,))
        row = next(iter(rows), None)
        if row is None or row[0] != "crashed":
            return
        await tx.execute("DELETE FROM events WHERE run_id = ? AND origin = 'reader'", (run_id,))
        await tx.execute(
            "UPDATE runs SET state = ?, stop_reason = NULL, detail = NULL, ended_at = NULL,"
            " heartbeat_at = ? WHERE run_id = ?",
            (self._state, time.time(), run_id),
        )
        await tx.execute(
            "UPDATE approvals SET state = 'pending', decided_by = NULL"
            " WHERE run_id = ? AND state = 'withdrawn' AND decided_by = ?",
            (run_id, CRASH_DETECTOR),
        )
        if self.on_correction is not None:
            self.on_correction(f"a reader marked this run crashed ({row[1]}); its runner is alive")

    async def _apply(self, db: Tx, e: Any) -> None:
        kind = e.kind
        if kind == "run_started":
            await db.execute(
                "INSERT INTO runs (run_id, env, script, model, mode, goal, state,"
                " started_at, pid, host, heartbeat_at, approve_mode, pid_started)"
                " VALUES (?, ?, ?, ?, ?, ?, 'ready', ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (run_id) DO UPDATE SET env = excluded.env,"
                " script = excluded.script, model = excluded.model, mode = excluded.mode,"
                " goal = excluded.goal, state = excluded.state, started_at = excluded.started_at,"
                " pid = excluded.pid, host = excluded.host, heartbeat_at = excluded.heartbeat_at,"
                " approve_mode = excluded.approve_mode, pid_started = excluded.pid_started",
                (e.run_id, e.env, e.script, e.model, e.mode, e.goal, e.at.isoformat(),
                 self.pid, self.host, time.time(), self.approve_mode, self.pid_started),
            )  # fmt: skip
        elif kind == "state_changed":
            self._state = e.target.value
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
            self._stopped = True
            await db.execute(
                "UPDATE approvals SET state = 'withdrawn' WHERE run_id = ? AND tool = 'ask_user'"
                " AND state = 'pending'",
                (e.run_id,),
            )
            await db.execute(
                "UPDATE runs SET state = ?, stop_reason = ?, detail = ?, ended_at = ?"
                " WHERE run_id = ?",
                (e.state.value, e.stop_reason.value, e.detail, e.at.isoformat(), e.run_id),
            )
        elif kind == "approval_requested":
            self._asked.add(e.call_id)  # its outcome goes on the approval's row
            await db.execute(
                "INSERT INTO approvals (run_id, call_id, tool, args, requested_at,"
                f" expires_at, state) VALUES (?, ?, ?, ?, ?, ?, 'pending') {ASKED_AGAIN}",
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
        elif kind == "question_asked":
            await db.execute(
                "INSERT INTO approvals (run_id, call_id, tool, args, requested_at,"
                f" expires_at, state) VALUES (?, ?, 'ask_user', ?, ?, ?, 'pending') {ASKED_AGAIN}",
                (e.run_id, e.question_id, json.dumps({"question": e.question}),
                 e.at.isoformat(), QUESTION_NEVER_EXPIRES),
            )  # fmt: skip
        elif kind == "question_answered":
            await db.execute(
                "UPDATE approvals SET state = 'answered', decided_by = ?, reason = ?,"
                " decided_at = ? WHERE run_id = ? AND call_id = ? AND state = 'pending'",
                (e.by, e.answer, e.at.isoformat(), e.run_id, e.question_id),
            )
        elif kind == "approval_withdrawn":
            await db.execute(
                "UPDATE approvals SET state = 'withdrawn' WHERE run_id = ? AND call_id = ?"
                " AND state = 'pending'",
                (e.run_id, e.call_id),
            )
        elif kind == "tool_finished" and e.call_id in self._asked:
            await db.execute(
                "UPDATE approvals SET outcome = ? WHERE run_id = ? AND call_id = ?",
                (e.status.value, e.run_id, e.call_id),
            )


EventRow = tuple[str, int, str, str, str]


async def _not_stored(
    tx: Tx, run_id: str, batch: list[tuple[EventBase, EventRow | None]]
) -> list[tuple[EventBase, EventRow | None]]:
    """What of a batch the store does not hold yet. A connection lost while its COMMIT was
    on the way (a PostgreSQL server restarting) raises StoreUnavailable though the batch may
    have landed: retried whole, its first row would clash with itself."""
    rows = await tx.fetchall(
        "SELECT MAX(seq) FROM events WHERE run_id = ? AND origin IS NULL", (run_id,)
    )
    stored = int(rows[0][0] or 0)
    return [item for item in batch if item[0].seq > stored]


def event_row(event: EventBase) -> EventRow:
    """An event's row: (run_id, seq, kind, at, body). `at` is read off the body the event was
    just serialized to (its third field, after run_id and seq: `,"at":"` cannot occur inside a
    JSON string), in `datetime.isoformat()`'s form; formatting the time again was a sixth of
    the cost of an append."""
    body = event_json(event)
    start = body.find(',"at":"') + 7
    end = body.find('"', start)
    if start < 7 or end < 0:
        return event.run_id, event.seq, getattr(event, "kind", ""), event.at.isoformat(), body
    at = body[start:end]
    if at.endswith("Z"):
        at = at[:-1] + "+00:00"
    return event.run_id, event.seq, getattr(event, "kind", ""), at, body


def event_json(event: EventBase) -> str:
    """An event as stored. Text that UTF-8 cannot carry is escaped, never fatal."""
    try:
        # The model's own serializer, without model_dump_json's argument handling per call.
        return type(event).__pydantic_serializer__.to_json(event).decode()
    except ValueError:  # pydantic's serialization error for lone surrogates is a ValueError
        return json.dumps(event.model_dump(mode="json"), default=str)
