"""Appending a run's events in batches; `flush()` is the acknowledgement the runtime awaits.

While the store cannot take writes (`StoreUnavailable`: unreachable, locked, disk full, its
login refused) the writer is in an outage: the events stay queued in order, are spilled
outside the store's folder (`store/spill.py`), and the commit is tried again with a bounded
backoff; the runtime holds meanwhile (`Journal.outage`, `recovered()`). The first commit that
lands writes the queue in order and ends the outage. What each event's rows are is
`store/event_rows.py`'s; each event's link in its run's hash chain, `store/chain.py`'s.

A worker's run is fenced (`fence`: its run and lease epoch): each commit checks the lease in
its own transaction (`store/leases.py`). Refused (`LeaseLost`), the writer drops what it holds
and every later event, never retries and never spills, and tells `on_lease_lost`.

An event that cannot be made JSON (env code handed the run a value that is not JSON data) is
never the batch's end: it is recorded as a stand-in (`store/stand_ins.py`: each value not
JSON data as `"<not JSON data: TYPE>"`), said (`on_stand_in`, `stand_ins`), and the rest of
the batch is committed, or spilled, with it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import cast

from loopdeck.core.events import Event
from loopdeck.core.recording import JournalOutage
from loopdeck.core.timeouts import bounded
from loopdeck.store.base import (
    PIPELINED_ROWS,
    Store,
    StoreError,
    StoreRefused,
    StoreUnavailable,
    Tx,
    run_whole,
)
from loopdeck.store.chain import CHAINED_COLUMNS, EVENT_COLUMNS, ChainedRow, LinkedRow, RunChain
from loopdeck.store.event_rows import RunRows, event_json, event_row
from loopdeck.store.leases import LeaseLost, check
from loopdeck.store.liveness import process_started, this_host
from loopdeck.store.spill import Spill
from loopdeck.store.stand_ins import row_of

__all__ = ["EVENT_COLUMNS", "EventWriter", "event_json", "event_row"]

BATCH_INTERVAL_S = 0.05
BATCH_MAX = 512
# On PostgreSQL a commit's COPY takes the events queued while it goes, for up to this long.
TAKING_S = BATCH_INTERVAL_S
# While the store cannot take writes: the next try after 0.1 s, doubling up to 2 s.
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 2.0
# How long `close` keeps trying a store that cannot take writes before it gives up (spill).
CLOSE_RETRY_S = 10.0
# A queued event: the event, the hash it follows in the run's chain, and its row with its own
# hash (hash None: linked at the commit; row None: serializing failed, tried again at the
# commit).
Queued = tuple[Event, str, ChainedRow | None]


class EventWriter:
    """A bus subscriber that queues events and commits them in batches, in order."""

    def __init__(
        self, store: Store, *, approve_mode: str = "", fence: tuple[str, int] | None = None
    ) -> None:
        self.store = store
        self.approve_mode = approve_mode
        # A worker's run: (run id, lease epoch), checked by every commit; None: not fenced.
        self.fence = fence
        self.lost: LeaseLost | None = None
        self.on_lease_lost: Callable[[LeaseLost], None] | None = None
        self.taking = True  # False: a worker let the run go; what comes after is not its
        self.pid = os.getpid()
        self.pid_started = process_started(self.pid)
        self.host = this_host()
        self.acknowledged_seq = 0
        self.error: StoreError | None = None
        # Told when a reader had marked this live run crashed and the writer undid it.
        self.on_correction: Callable[[str], None] | None = None
        # Told when an outage ended (the runner brings back other processes' spills then).
        self.on_recovery: Callable[[], None] | None = None
        # Told of each event recorded as a stand-in (it could not be made JSON: `row_of`).
        self.on_stand_in: Callable[[str], None] | None = None
        self.stand_ins: list[str] = []
        # Told once, when its first batch is committed: the run is in the store (its row, its
        # start), and another terminal can name it.
        self.on_first_commit: Callable[[], None] | None = None
        # Each event with its row (its JSON made where the event was made) linked into the
        # run's hash chain as it is published: the next batch is made while the previous one
        # is being inserted on the store's thread. A row of None: serializing failed, and is
        # tried again (and reported) when the batch is committed.
        self._queue: list[Queued] = []
        self._growing: list[Queued] | None = None  # `flush`'s batch that may take more
        self.chain = RunChain()
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.rows = RunRows(self, store.backend)
        # An outage: the store cannot take writes now; the runtime holds until it ends.
        self.outage: JournalOutage | None = None
        self._available = asyncio.Event()
        self._available.set()
        self._spill: Spill | None = None
        self._spilled_through = 0  # the last seq the spill file holds
        self.close_retry_s = CLOSE_RETRY_S

    def __call__(self, event: Event) -> None:
        if self.lost is not None or not self.taking:
            return  # the run is another worker's now: nothing more of this one is kept
        chain = self.chain
        after = chain.tail_hash
        try:  # the event's own row, linked: once per event, the runaway's path
            made = event_row(event)
            row: ChainedRow | None = chain.queued(made[1], made)
        except Exception:  # not JSON data (a stand-in's row), or left to the commit
            row = self._made_again(event)
        self._queue.append((event, after, row))
        if self.outage is not None:
            return  # an outage keeps its own pace
        queued = len(self._queue)
        if queued == BATCH_MAX:  # a full batch: committed now (the wake stays set until then)
            self._wake.set()
        elif queued == 1 and self._task is not None:
            if self.on_first_commit is not None:  # the run's start, awaited: committed now
                self._wake.set()  # (a worker claims its next run once it is in the store)
                return
            # A batch begins: committed BATCH_INTERVAL_S from now. An idle writer (its run
            # waits on its operator, or in a long tool) is never woken for nothing: a worker
            # holds hundreds of them.
            self._task.get_loop().call_later(BATCH_INTERVAL_S, self._wake.set)

    def _made_again(self, event: Event) -> ChainedRow | None:
        """The row of an event whose own row could not be made: its stand-in's, said; None
        (and the chain's tail unknown) when even that fails: the commit makes it again."""
        chain = self.chain
        try:
            made, stand_in = row_of(event)
            row = chain.queued(event.seq, made)
        except Exception:  # never the publisher's problem
            chain.broken()
            return None
        if stand_in is not None:
            self.stand_ins.append(stand_in)
            if self.on_stand_in is not None:
                self.on_stand_in(stand_in)
        return row

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="loopdeck-event-writer")

    async def _loop(self) -> None:
        wait = BATCH_INTERVAL_S
        while not self._closing:
            if self._queue or self.outage is not None:
                with contextlib.suppress(TimeoutError):
                    await bounded(self._wake.wait(), wait)
            else:
                await self._wake.wait()  # idle until an event's batch is due, or `close`
            self._wake.clear()
            try:
                await self.flush(takes_more=True)
                wait = BATCH_INTERVAL_S
            except LeaseLost:
                return  # nothing more is committed: `on_lease_lost` was told
            except StoreError as exc:
                self.error = exc  # kept, retried; nothing queued is dropped
                if self.outage is not None:
                    wait = RETRY_FIRST_S if wait < RETRY_FIRST_S else min(wait * 2, RETRY_MAX_S)

    async def recovered(self) -> None:
        """Returns once the store takes writes again (at once when it does)."""
        await self._available.wait()

    async def flush(self, *, takes_more: bool = False) -> None:
        """Commit everything queued so far; returns once it is durable. Any failure is a
        StoreError, and what was not committed stays queued (for the next try or the spill)."""
        async with self._lock:
            if not self._queue:
                return
            batch, self._queue = self._queue, []
            try:
                self._growing = batch if takes_more and not self.on_first_commit else None
                await self.commit(batch)
            except LeaseLost as exc:
                self._lose(exc)
                raise
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

    def _lose(self, exc: LeaseLost) -> None:
        """Refused by the fence: what is queued (and spilled) is dropped, never written."""
        self._queue, self.lost, self.error = [], exc, exc
        if self._spill is not None:
            self._spill.release(remove=True)
        self.outage = None
        self._available.set()  # nobody waits on a store this run may not write any more
        if self.on_lease_lost is not None:
            self.on_lease_lost(exc)

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
                 "pid_started": self.pid_started, "approve_mode": self.approve_mode,
                 "epoch": None if self.fence is None else self.fence[1]},
            )  # fmt: skip
        last = self._queue[-1][0].seq
        if self._spill.path is not None and last == self._spilled_through:
            return self._spill.path
        lines = [row[4] if row else row_of(event)[0][4] for event, _, row in self._queue]
        path = self._spill.write(lines)
        self._spilled_through = last if path is not None else 0
        return path

    async def close(self) -> None:
        """Commit what is left; a store that cannot take writes is tried again for up to
        `close_retry_s`, then the StoreUnavailable goes to the caller (who spills). A login
        the store refuses goes to the caller at once: it will not change in seconds."""
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
            except LeaseLost:
                return  # dropped, as it must be: `on_lease_lost` was told
            except StoreRefused:
                raise
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
        self.rows.state = state or self.rows.state
        self.rows.asked |= asked

    async def write_back(self, events: list[Event]) -> None:
        """Events made by another process, committed as that process would have, in one
        transaction."""
        await self.commit([(event, "", None) for event in events])

    async def commit(self, batch: list[Queued]) -> None:
        """The batch in one transaction, whole (`run_whole`: on SQLite one call on the
        connection's thread), then what it tells: a false crash undone, the chain's head.
        `flush(takes_more=True)`'s batch, not a run's first, takes what is queued meanwhile."""
        takes_more, self._growing = self._growing is batch, None
        # Pipelined: on PostgreSQL its statements go in few messages (`store/pg_batched.py`).
        async with self.store.transaction(batch[0][0].run_id, pipelined=True) as tx:
            last, correction = await run_whole(tx, partial(self._write, batch, takes_more))
        if correction is not None and self.on_correction is not None:
            self.on_correction(correction)
        self.chain.committed(last, bool(self._queue))
        if self.on_first_commit is not None:
            told, self.on_first_commit = self.on_first_commit, None
            told()

    async def _write(
        self, batch: list[Queued], takes_more: bool, tx: Tx
    ) -> tuple[ChainedRow | None, str | None]:
        """The batch's transaction: the fence, a reader's false crash undone, the rows linked
        and appended, the runs and approvals rows; its last row and the correction's words.
        On SQLite it runs on the store's thread: it reads and changes only the batch, `rows`
        and the chain's head (never the queue nor the chain's tail, which `__call__` moves
        meanwhile), and tells nobody anything until it returns."""
        run_id, given = batch[0][0].run_id, batch
        ended = None if self.fence is None else await check(tx, self.store, *self.fence)
        correction = await self.rows.undo_a_false_crash(tx, run_id, ended)
        if self.outage is not None:  # the commit that failed may have landed all the same
            batch = await _not_stored(tx, run_id, batch)
        if not batch:
            return None, correction
        if None in [item[2] for item in batch]:  # made again here (a stand-in if need be)
            batch = [(e, after, row or (*row_of(e)[0], None)) for e, after, row in batch]
        linked = cast(list[LinkedRow], batch)  # each with its row now
        rows = await self.chain.rows(tx, run_id, batch[0][0].seq, linked)
        # A plain append (COPY or one INSERT on PostgreSQL): no reader's row can sit at a
        # runner's sequence number any more, and a clash would be a bug to report, never an
        # event to drop.
        last, append_taking = rows[-1], getattr(tx, "append_taking", None)

        def applied() -> Awaitable[None]:  # the runs and approvals rows of the whole batch
            return self.rows.apply_batch(tx, [item[0] for item in batch])

        if takes_more and append_taking and batch is given and len(rows) >= PIPELINED_ROWS:
            # Worked out (held, never read) once the COPY took its last row, while the server
            # is still taking them: grown by the COPY, the batch is whole by then.
            await append_taking("events", CHAINED_COLUMNS, rows, self._taking(batch, last), applied)
            last = cast(ChainedRow, batch[-1][2]) if len(batch) > len(rows) else last
        else:
            await tx.append("events", CHAINED_COLUMNS, rows)
            await applied()
        return last, correction

    def _taking(self, batch: list[Queued], last: ChainedRow) -> Callable[[], list[ChainedRow]]:
        """The events queued since, for a COPY that takes them while it goes: each linked after
        the last row sent, moved to the batch (requeued with it if it fails), for up to TAKING_S."""
        until, after = time.monotonic() + TAKING_S, last[5]

        def more() -> list[ChainedRow]:
            nonlocal after
            taken: list[ChainedRow] = []
            if time.monotonic() > until:
                return taken
            for _, follows, row in self._queue:  # as queued: each linked after the one before
                if row is None or row[5] is None or follows != after:
                    break
                taken.append(row)
                after = row[5]
            batch.extend(self._queue[: len(taken)])
            del self._queue[: len(taken)]
            return taken

        return more


async def _not_stored(tx: Tx, run_id: str, batch: list[Queued]) -> list[Queued]:
    """What of a batch the store does not hold yet. A connection lost while its COMMIT was
    on the way (a PostgreSQL server restarting) raises StoreUnavailable though the batch may
    have landed: retried whole, its first row would clash with itself."""
    rows = await tx.fetchall(
        "SELECT MAX(seq) FROM events WHERE run_id = ? AND origin IS NULL", (run_id,)
    )
    stored = int(rows[0][0] or 0)
    return [item for item in batch if item[0].seq > stored]
