"""`StoreLink`: the console's link to a run living in another process, through the store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import (
    ApprovalRequested,
    CallProposed,
    Event,
    EventBase,
    QuestionAnswered,
    QuestionAsked,
    RunStopped,
)
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.runtime import Runtime
from loopdeck.core.timeouts import bounded
from loopdeck.operator import following
from loopdeck.operator.link_commands import (
    NOT_FOLLOWING,
    FailureListener,
    LinkCommands,
    ToldListener,
)
from loopdeck.operator.links import EventSink, Listener, Tell, refuse_unoffered
from loopdeck.operator.outage import Outage
from loopdeck.operator.replay_link import parse_held, parse_rows
from loopdeck.store import deciding, leases, presence, queries
from loopdeck.store.base import Location, Store, StoreError, StoreUnavailable
from loopdeck.store.opening import open_store
from loopdeck.tuning import collector

log = logging.getLogger(__name__)

# The events whose words the console asks the link about (`_note`).
NOTED: frozenset[type[EventBase]] = frozenset(
    {CallProposed, QuestionAsked, QuestionAnswered, RunStopped, ApprovalRequested}
)


async def _dropped(read: asyncio.Task[Any] | None) -> None:
    """A read ahead no longer wanted (the link stops, or its store failed): cancelled and
    waited for, so the store closes after it. How it ended is not news, unless it is no
    store's failure (said in the log)."""
    if read is None:
        return
    read.cancel()
    await asyncio.wait([read])  # this task's own cancellation still comes through
    error = None if read.cancelled() else read.exception()
    if error is not None and not isinstance(error, StoreError):
        log.warning("a read ahead of the run's events failed", exc_info=error)


WORKERS_READ_S = presence.READ_EVERY_S  # a parked run's store: which workers run


class StoreLink:
    """A run living in another process: its events tailed from the store, commands sent there."""

    POLL_S = 0.1
    CRASH_CHECK_S = following.CRASH_CHECK_S
    BATCH = 5000  # events read at once; a full batch means more are there already
    # The collector waits this many full batches in a row at most: a runaway's runner may
    # write faster than the console reads, and the collector must not wait for good.
    HOLD_BATCHES = 40
    FOLD_WAIT_S = 1.0  # a history's hold outlives the link's drive this long at most
    PENDING_EVERY_S = 0.5  # the approvals waiting, read at least this often while reading

    def __init__(self, db_path: Location | None, run_id: str) -> None:
        self.db_path = db_path
        self.run_id = run_id
        self.runtime: Runtime | None = None
        self.store: Store | None = None
        self._sinks: list[EventSink] = []
        self._listeners: list[Listener] = []
        self._pending: list[ApprovalRequest] = []
        self._risks: dict[str, str] = {}
        self._requested: dict[str, ApprovalRequest] = {}
        self._questions: dict[str, QuestionAsked] = {}
        self._closing: asyncio.Event | None = None
        self._closed: asyncio.Event | None = None
        self.phase = "the run's first events from the store"
        # The store cannot be read for now (its server restarted, say): the header says so.
        self.outage = Outage()
        closing = self._closing_now
        self.commands = LinkCommands(run_id, self.outage, lambda: self.store, closing, self._wait)
        # True while full batches come back: the console draws progress, not every batch.
        self.reading_history = False
        self._history: collector.Hold | None = None  # the collector held while it is read
        # ... until the console folded the batch that caught up, when it says it will (`folds`).
        self.folds = False
        self._held_to_fold = False
        # While its worker parked it (none holds it): the lease's note ("parked by host-a:
        # waits for c3's approval"), else "". Not read again once it cannot be parked any
        # more: never placed (a run of its own process), or ended.
        self.parked = ""
        self._placement_final = False
        self._placement_read_at: int | None = None  # the store's change counter then
        # While parked: no worker runs for the store (`store/presence.py`), so none takes the
        # run up until one starts. Read as it is parked, then every `WORKERS_READ_S` (a
        # worker killed goes silent with nothing committed; a busy store commits always).
        self.workerless = False
        self._workers_read_at = -math.inf

    @property
    def commands_in_flight(self) -> int:
        """Commands (stop, pause, a message…) on their way to the store."""
        return len(self.commands.sending)

    def _closing_now(self) -> bool:
        return self._closing is None or self._closing.is_set()

    @property
    def store_outage(self) -> str:
        """While the store cannot be read: "store unreachable since 21:04:10, retrying"."""
        return self.outage.text

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        self._sinks.append(sink)
        return lambda: self._sinks.remove(sink) if sink in self._sinks else None

    def on_approvals(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    async def drive(self) -> RunOutcome | None:
        self._closing, self._closed = asyncio.Event(), asyncio.Event()
        self.store = await open_store(self.db_path, create=False)
        history = self._history = collector.Hold()
        # A full batch means more rows are there already: the next batch is read (on the
        # store's thread or connection) while this one is parsed and handed out.
        ahead: asyncio.Task[list[Any]] | None = None
        try:
            seq, crash_checked, stopped, full = 0, time.monotonic(), False, 0
            pending_read_at, pending_read = -self.PENDING_EVERY_S, False
            while not stopped and not self._closing.is_set():
                try:
                    pending_read = False
                    reading, ahead = ahead, None
                    rows = await (reading or self._events_after(seq))
                    seq = rows[-1]["seq"] if rows else seq
                    # A long history is read in full batches: the collector waits until the
                    # console caught up (each parsed event dies once folded, never examined).
                    full = full + 1 if len(rows) == self.BATCH else 0
                    self.reading_history = full > 0
                    self._hold_for(history, full)
                    if full:
                        ahead = self._events_after(seq)
                    parsed = parse_held(rows) if history.holding else parse_rows(rows)
                    stopped = self._hand_out(parsed)
                    # The approvals waiting are read once caught up, and every PENDING_EVERY_S
                    # while full batches come: not once a batch of a history read in full.
                    if not full or time.monotonic() - pending_read_at >= self.PENDING_EVERY_S:
                        pending_read_at = time.monotonic()
                        await self._refresh_pending()
                        pending_read = True
                    if time.monotonic() - crash_checked >= self.CRASH_CHECK_S and not stopped:
                        crash_checked = time.monotonic()
                        await queries.mark_crashed_runners(self.store)
                except StoreUnavailable as exc:  # said in the header; read again soon
                    await _dropped(ahead)  # read again from `seq`, after the wait
                    ahead, self._held_to_fold = None, False
                    self.outage.failed(exc)
                    history.release()
                    await self._wait(self.store)
                    continue
                self.outage.recovered()
                if not stopped and len(rows) < self.BATCH:  # caught up: wait for more
                    await self._wait(self.store)
            if not (stopped and pending_read):  # the stop's own batch read them already
                with contextlib.suppress(StoreUnavailable):
                    await self._refresh_pending()
            return None
        finally:
            await _dropped(ahead)
            if self._held_to_fold:  # given back once folded, or a while after at the latest
                asyncio.get_running_loop().call_later(self.FOLD_WAIT_S, self.folded)
            else:
                history.release()
            store, self.store = self.store, None
            await asyncio.shield(store.close())
            self._closed.set()

    def _hold_for(self, history: collector.Hold, full: int) -> None:
        """Held while full batches come (HOLD_BATCHES in a row at most) and, for a console that
        says when it folded (`folds`), past the batch that caught up until it is folded."""
        if 0 < full <= self.HOLD_BATCHES:
            history.hold()
        elif self.folds and history.holding and not full and not self._held_to_fold:
            self._held_to_fold = True
        else:
            self._held_to_fold = False
            history.release()

    def folded(self) -> None:
        """The console folded what was handed out: the hold of a history that caught up ends
        now, so the collection it was holding back walks the view, not the whole history
        parsed and not yet folded (~180,000 objects of a 100,000-event run, ~0.1 s). Not said
        in time, the link's next read or its timer (`FOLD_WAIT_S`) ends it."""
        if self._held_to_fold and self._history is not None:
            self._held_to_fold = False
            self._history.release()

    def _hand_out(self, events: list[Event]) -> bool:
        """Each event to each sink, the noted ones kept: True once the run's stop is among them."""
        sinks, stopped = list(self._sinks), False
        for event in events:
            if type(event) in NOTED:  # RunStopped among them
                self._note(event)
                stopped = stopped or type(event) is RunStopped
            for sink in sinks:
                sink(event)
        return stopped

    def _events_after(self, seq: int) -> asyncio.Task[list[Any]]:
        assert self.store is not None
        return asyncio.ensure_future(queries.events_after(self.store, self.run_id, seq, self.BATCH))

    async def _wait(self, store: Store) -> None:
        """Until the store changed (PostgreSQL's NOTIFY; SQLite: the next poll) or closing."""
        assert self._closing is not None
        waits = [
            asyncio.ensure_future(self._closing.wait()),
            asyncio.ensure_future(store.wait_for_change(self.POLL_S)),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def close(self) -> None:
        """Stop following and wait for the store to close: a query still running when the
        loop ends would answer into a closed loop."""
        if self._closing is None or self._closed is None:
            return
        self._closing.set()
        with contextlib.suppress(TimeoutError):
            await bounded(self._closed.wait(), 2.0)
        self.folded()  # nothing more is folded

    def _note(self, event: Event) -> None:  # for the classes in NOTED
        """What the console asks the link about, kept from the events as they pass."""
        match event:
            case CallProposed():
                self._risks[event.tool] = event.risk
            case QuestionAsked():
                self._questions[event.question_id] = event
                self._notify()
            case QuestionAnswered() if self._questions:
                self._questions.pop(event.question_id, None)
                self._notify()
            case RunStopped() if self._questions:
                self._questions.clear()
                self._notify()
            case ApprovalRequested():
                self._requested[event.call_id] = ApprovalRequest(
                    **event.model_dump(exclude={"kind", "seq", "at"})
                )

    async def _refresh_pending(self) -> None:
        assert self.store is not None
        rows = await queries.pending_approvals(self.store, self.run_id)
        pending = []
        for row in rows:
            # The asking as the row has it, which a decision names (a moved run asked again).
            asked = {at: datetime.fromisoformat(row[at]) for at in ("requested_at", "expires_at")}
            known = self._requested.get(row["call_id"])
            pending.append(
                known.model_copy(update=asked)
                if known is not None
                else ApprovalRequest(
                    run_id=row["run_id"],
                    call_id=row["call_id"],
                    tool=row["tool"],
                    args=row["args"],
                    args_sha256="",
                    state_hash="",
                    fingerprint="",
                    plan_step=None,
                    **asked,
                )
            )

        def identity(items: list[ApprovalRequest]) -> list[tuple[str, datetime]]:
            return [(p.call_id, p.requested_at) for p in items]

        if identity(pending) != identity(self._pending):
            self._pending = pending
            for listener in list(self._listeners):
                listener()
        await self._refresh_parked()

    async def _refresh_parked(self) -> None:
        """Whether its worker parked the run, read with what waits on the operator: a parked
        run waits for them, and a free worker takes it up once they decided. Read again only
        once another connection committed (the link itself never writes a lease)."""
        if self._placement_final:
            return
        assert self.store is not None
        counter = await queries.change_counter(self.store)
        parked, final = self.parked, False  # said with its workers, never one without the other
        if counter != self._placement_read_at:
            row = await leases.parking(self.store, self.run_id)
            state, note = (None, None) if row is None else row
            final = state is None or state == leases.ENDED
            parked = str(note or leases.PARKED) if state == leases.PARKED else ""
        due = time.monotonic() - self._workers_read_at >= WORKERS_READ_S
        if parked and (due or not self.parked):  # not on every commit: a busy store
            self._workers_read_at, now = time.monotonic(), time.time()
            self.workerless = not presence.running(await presence.seen(self.store, now), now)
        self.parked, self._placement_read_at = parked, counter
        self._placement_final = final

    def pending(self) -> list[ApprovalRequest]:
        return list(self._pending)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    def questions(self) -> list[tuple[str, str]]:
        return [(question_id, asked.question) for question_id, asked in self._questions.items()]

    async def answer(
        self, question_id: str, text: str, by: str, tell: Tell = deciding.untold
    ) -> bool:
        if self.store is None:
            raise StoreError(NOT_FOLLOWING)
        refuse_unoffered(self._questions.get(question_id), text)
        return await deciding.answer(
            self.store, self.run_id, text, by, question_id=question_id, tell=tell
        )

    async def decide(self, decision: ApprovalDecision, tell: Tell = deciding.untold) -> bool:
        if self.store is None:
            raise StoreError(NOT_FOLLOWING)
        shown = next((p for p in self._pending if p.call_id == decision.call_id), None)
        asked_at = None if shown is None else shown.requested_at.isoformat()  # as its dialog
        won = await deciding.decide(self.store, self.run_id, decision, tell=tell, asked_at=asked_at)
        await self._refresh_pending()
        return won

    def on_failure(self, listener: FailureListener) -> Callable[[], None]:
        """Told of each command that could not be sent (the console shows it)."""
        return self.commands.on_failure(listener)

    def on_told(self, listener: ToldListener) -> Callable[[], None]:
        """Told what came of a stop, a kill or a message once the store took it."""
        return self.commands.on_told(listener)

    def _send(self, command: str, by: str, said: Any = None) -> None:
        self.commands.send(command, by, said)

    def stop(self, by: str) -> None:
        self._send("cancel", by)

    def kill(self, by: str) -> None:
        self._send("kill", by)

    def pause(self, by: str) -> None:
        self._send("pause", by)

    def resume(self, by: str) -> None:
        self._send("resume", by)

    async def pause_or_resume(self, verb: str, by: str, tell: Tell = deciding.untold) -> str | None:
        """Through the store, as `loopdeck pause/resume` (`deciding.pause_or_resume`)."""
        if self.store is None:
            raise StoreError(NOT_FOLLOWING)
        return await deciding.pause_or_resume(self.store, self.run_id, verb, by, tell=tell)

    def message(self, text: str, by: str) -> None:
        self._send(queries.MESSAGE, by, text)

    async def revoke(self, grant_id: str, by: str) -> str | None:
        self._send(queries.REVOKE, by, {"grant_id": grant_id})
        return None

    async def resolve(
        self, call_id: str, applied: bool, by: str, tell: Tell = deciding.untold
    ) -> str | None:
        if self.store is None:
            raise StoreError(NOT_FOLLOWING)
        return await deciding.resolve(
            self.store, self.run_id, call_id, applied=applied, by=by, tell=tell
        )

    def risk_of(self, tool: str) -> str:
        return self._risks.get(tool, "write")
