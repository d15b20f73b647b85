"""Running a prepared run with the store: events out, commands and approvals in, heartbeat."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from loopdeck.core.events import Event, RunCorrected, RunStarted
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.recorded_inputs import record_inputs
from loopdeck.core.runtime import Runtime
from loopdeck.core.unknown_outcomes import Unresolvable
from loopdeck.store import queries
from loopdeck.store.base import Store, StoreError, StoreRefused
from loopdeck.store.liveness import Heartbeat
from loopdeck.store.replay import bring_back_spills
from loopdeck.store.writer import EventWriter

COMMAND_POLL_S = 0.1


async def serve_commands(
    store: Store, runtime: Runtime, done: asyncio.Event, say: Callable[[str], None]
) -> None:
    """Until `done`: a cancellation alone is not enough on Python 3.11, whose `wait_for` can
    swallow one that lands as the awaited change arrives (likely with many runners notifying);
    the poller then ran on and held its runner's exit. A poll that fails otherwise than by a
    store it cannot reach for now is said, once, and tried again: the run must stay stoppable
    from other terminals, and its own stop never waits on the poller. A store that refuses
    the run's login is told to the run, which then hears nothing from anyone: it holds, and
    stops at its bound unless a poll works again first (`RecordingHold.refused`)."""
    run_id = runtime.config.run_id
    failing = refused = False
    while not done.is_set():
        try:
            try:
                await _apply_commands(store, runtime, run_id, say)
            except StoreRefused as exc:
                refused = True
                runtime.recording.refused(exc.cause, str(exc))
            except StoreError:
                pass  # a locked store: the next tick tries again; the runtime is not held up
            else:
                if refused:
                    refused = False
                    runtime.recording.accepted()
        except Exception as exc:  # said, not swallowed: the next tick tries again
            if not failing:
                say(
                    f"run {run_id}: commands from other terminals (cancel, kill, pause,"
                    f" message) cannot be read: {type(exc).__name__}: {exc} — retrying; a kill"
                    " here still works"
                )
            failing = True
        else:
            if failing:
                say(f"run {run_id}: commands from other terminals reach the run again")
            failing = False
        await store.wait_for_change(COMMAND_POLL_S)


async def _apply_commands(
    store: Store, runtime: Runtime, run_id: str, say: Callable[[str], None]
) -> None:
    for command in await queries.take_commands(store, run_id):
        apply_command(runtime, command, say)


def apply_command(runtime: Runtime, command: dict[str, Any], say: Callable[[str], None]) -> None:
    """One command from another terminal (`queries.take_commands`), done in the run."""
    run_id, by = runtime.config.run_id, command["by"]
    if command["command"] == "cancel":
        runtime.cancel(after_current_tools=True, by=by)
    elif command["command"] == "kill":
        runtime.kill(by=by)
    elif command["command"] == "pause":
        runtime.pause(by=by)
    elif command["command"] == "resume":
        runtime.resume(by=by)
    elif command["command"] == queries.MESSAGE:
        runtime.message(command["text"], by=by)
    elif command["command"] == queries.REVOKE:
        if why := runtime.revoke(str(command["said"]["grant_id"]), by=by):
            say(f"run {run_id}: revoke from {by} not done: {why}")
    elif command["command"] == queries.RESOLVE:
        said = command["said"]
        try:
            runtime.resolve(str(said["call_id"]), bool(said["applied"]), by=by)
        except Unresolvable as exc:
            say(f"run {run_id}: resolution from {by} not taken: {exc}")


class RunAbandoned(Exception):
    """The runtime was cancelled before it recorded its stop (`RecordedRun.abandon`)."""


class RecordedRun:
    """Wires a runtime to the store for the length of one run."""

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        writer: EventWriter,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        # Told what goes wrong while the run goes on (its command poller failing).
        self.say: Callable[[str], None] = say or self.notes_append
        self.runtime = runtime
        self.writer = writer
        self.persist_error: str | None = None
        self.abandoned_by: str | None = None
        self._running: asyncio.Task[RunOutcome] | None = None
        self._started = False
        self._kill_at_start: str | None = None
        self._unsubscribe_start: Callable[[], None] = lambda: None
        # Other runners' spills of this store, brought back when an outage of its ends.
        self.notes: list[str] = []
        self._bringing_back: asyncio.Task[None] | None = None

    def notes_append(self, note: str) -> None:
        self.notes.append(note)

    def kill(self, by: str) -> None:
        """Kill the run now; one whose start is not recorded yet (its model still loading) is
        killed as it starts, so its record begins with its start and holds the kill."""
        if self._started:
            self.runtime.kill(by=by)
        else:
            self._kill_at_start = by

    def _on_start(self, event: Event) -> None:
        if isinstance(event, RunStarted) and not self._started:
            self._started = True
            self._unsubscribe_start()  # the events after it do not pass here
            if self._kill_at_start is not None:
                # Not from inside the bus's hand-out: at the run's first checkpoint.
                asyncio.get_running_loop().call_soon(self.runtime.kill, self._kill_at_start)

    def abandon(self, by: str) -> bool:
        """Harder than a kill (a second stop signal): the runtime is cancelled where it is,
        before its stop; the writer is never cancelled, so what was emitted is committed.
        False once the runtime has ended (its last events are being committed)."""
        if self._running is None or self._running.done():
            return False
        self.abandoned_by = by
        self._running.cancel()
        return True

    async def run(self) -> RunOutcome:
        runtime = self.runtime
        run_id = runtime.config.run_id
        # Its model's replies and its env's state as seen, in its log: it can be forked.
        record_inputs(runtime)
        unsubscribe = runtime.bus.subscribe(self.writer)
        self._unsubscribe_start = runtime.bus.subscribe(self._on_start)
        runtime.journal = self.writer
        self.writer.on_correction = lambda detail: runtime.emit(
            RunCorrected, run_id=run_id, detail=detail
        )
        self.writer.on_recovery = self._bring_back_spills
        # An event recorded as a stand-in (it could not be made JSON) is said as it happens.
        self.writer.on_stand_in = self.say
        self.writer.start()
        heartbeat = Heartbeat(self.store, run_id)
        heartbeat.start()
        done = asyncio.Event()
        commands = asyncio.create_task(serve_commands(self.store, runtime, done, self.say))
        # The runtime in a task of its own: `abandon` can cancel it and nothing else.
        self._running = asyncio.create_task(runtime.run(), name=f"loopdeck-run-{run_id}")
        try:
            return await self._running
        except asyncio.CancelledError:
            outer = asyncio.current_task()
            if self.abandoned_by is None or (outer is not None and outer.cancelling()):
                raise
            raise RunAbandoned(
                f"run {run_id} was abandoned by {self.abandoned_by} before it recorded its stop;"
                " every event it emitted is recorded"
            ) from None
        finally:
            heartbeat.stop()
            done.set()
            commands.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await commands
            try:
                await self.writer.close()
            except StoreError as exc:
                self.persist_error = self._spilled(exc)
            if self._bringing_back is not None:
                await self._bringing_back
            unsubscribe()
            self._unsubscribe_start()

    def _bring_back_spills(self) -> None:
        """The store takes writes again: what other runners spilled into it meanwhile (they
        left before it was back) goes in now, not only when a process next opens it."""
        if self._bringing_back is None or self._bringing_back.done():
            self._bringing_back = asyncio.create_task(self._bring_back())

    async def _bring_back(self) -> None:
        self.notes += await bring_back_spills(self.store)

    def _spilled(self, exc: StoreError) -> str:
        """The store's error, and where what it could not take went; a spill that fails
        itself is said with it, never in its place."""
        try:
            spilled = self.writer.spill()
        except Exception as failed:  # the store's error is still the one to tell
            return (
                f"{exc}; the unsaved events could not be spilled either"
                f" ({type(failed).__name__}: {failed})"
            )
        if spilled is not None:
            return (
                f"{exc}; the unsaved events are in {spilled}: the next loopdeck process to open"
                " the store writes them into it"
            )
        problems = "; ".join(self.writer.spill_problems) or "nothing was left to write"
        return f"{exc}; the unsaved events could not be spilled anywhere either ({problems})"
