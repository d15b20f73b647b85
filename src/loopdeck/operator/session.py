"""One run of this process, from the operator's options to its record: prepared
(`launch.prepare_run`, its deciders chosen by `approving.deciders`), recorded to the store
(its writer and `RecordedRun`), and linked to the console (`LocalLink`).

The headless CLI run, the console's run and a run started from the fleet all go through here:
this is the one place a run's `EventWriter` and `RecordedRun` are made. A session given a
store location records there; without one (a test's console) the run is not recorded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from loopdeck.core.outcome import RunOutcome
from loopdeck.core.runtime import Runtime
from loopdeck.core.scenario import ScenarioError
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import PreparedRun, RunOptions, prepare_run
from loopdeck.operator.links import LocalLink
from loopdeck.store import queries
from loopdeck.store.base import Location, Store, shown_location
from loopdeck.store.opening import open_store
from loopdeck.store.runner import RecordedRun
from loopdeck.store.runner import RunAbandoned as RunAbandoned  # what `record` raises
from loopdeck.store.writer import EventWriter

Say = Callable[[str], None]


class RunSession:
    """Prepare (`prepare`), open the store (`opened`), record (`record`) and link (`link`)
    one run. Its store and writer are what the run's approver asks (`store.approver.Recording`):
    the console's queue is made as the run is prepared, the store opened as it starts."""

    def __init__(self, location: Location | None, *, console: bool = False, say: Say | None = None):
        self.location = location
        self.console = console
        # What the recording has to say (spilled events brought back, events it could not
        # save): told to `say` and kept in `said`.
        self.said: list[str] = []
        self._say = say
        self._prepared: PreparedRun | None = None
        self._queue: ApprovalQueue | None = None
        self.approve_mode = "console" if console else "auto"
        self._store: Store | None = None
        self._writer: EventWriter | None = None
        self._recorded: RecordedRun | None = None
        # A kill before the recording began (the model library still loading): handed to the
        # recording, so the store holds the kill and the run's every event.
        self._kill_before_recording: str | None = None
        # Told once the run is in the store (its first events committed): its id can be named.
        self.on_recorded: Callable[[], None] | None = None

    @property
    def recorded(self) -> bool:
        return self.location is not None

    def prepare(self, options: RunOptions) -> PreparedRun:
        """The run, its approver and answerer chosen from `--approve` or the console."""
        self._prepared = prepare_run(
            options, console=self.console, recording=self if self.recorded else None
        )
        self._queue = self._prepared.queue
        for warning in self._prepared.warnings:
            self.say(warning)
        if not self.console:
            self.approve_mode = options.approve or "auto"
        return self._prepared

    @classmethod
    def adopted(
        cls, prepared: PreparedRun, queue: ApprovalQueue, location: Location | None = None
    ) -> RunSession:
        """The console's session of a run its caller prepared with its own queue (a test, a
        benchmark)."""
        session = cls(location, console=True)
        session._prepared, session._queue = prepared, queue
        return session

    @property
    def prepared(self) -> PreparedRun:
        if self._prepared is None:
            raise RuntimeError("the session's run is not prepared yet")
        return self._prepared

    @property
    def runtime(self) -> Runtime:
        return self.prepared.runtime

    @property
    def queue(self) -> ApprovalQueue:
        """The console's queue: what its dialogs offer and decide."""
        if self._queue is None:
            raise RuntimeError("this run is not decided in a console (it has no queue)")
        return self._queue

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("the run's store is not open yet")
        return self._store

    @property
    def writer(self) -> EventWriter:
        if self._writer is None:
            raise RuntimeError("the run is not being recorded yet")
        return self._writer

    def say(self, message: str) -> None:
        self.said.append(message)
        if self._say is not None:
            self._say(message)

    def listen(self, listener: Say) -> Callable[[], None]:
        """`listener` hears what the recording says from now on, after what it said before
        (the console's run screen: each a notification)."""
        for message in self.said:
            listener(message)
        self._say = listener
        return lambda: setattr(self, "_say", None) if self._say is listener else None

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[Store]:
        """The run's store, open for the length of the block (made if missing); its notes
        (spilled events brought back, or kept for later) said first."""
        self._store = await open_store(self.location)
        try:
            for note in self._store.notes:
                self.say(note)
            yield self._store
        finally:
            await self._store.close()

    async def refuse_taken_id(self, run_id: str | None) -> None:
        """`ScenarioError` if the open store already holds a run `run_id` (`--run-id`): its
        events would collide with the other run's."""
        if run_id and await queries.run_row(self.store, run_id) is not None:
            raise ScenarioError(
                f"--run-id {run_id}: {shown_location(self.store.path)} already holds a run with"
                " this id; choose another"
            )

    async def record(self) -> RunOutcome:
        """Run it recorded to the open store; what the recording could not do is said. A run
        id the store already holds (`--run-id`) is refused before anything is written: its
        events would collide with the other run's."""
        await self.refuse_taken_id(self.runtime.config.run_id)
        self._writer = EventWriter(self.store, approve_mode=self.approve_mode)
        self._writer.on_first_commit = self.on_recorded
        recorded = self._recorded = RecordedRun(self.store, self.runtime, self._writer, self.say)
        if self._kill_before_recording is not None:
            recorded.kill(self._kill_before_recording)
        try:
            return await recorded.run()
        finally:
            for note in recorded.notes:  # other runners' spills brought back
                self.say(note)
            if recorded.persist_error:
                self.say(recorded.persist_error)

    async def run(self, phase: Say | None = None) -> RunOutcome:
        """Open the store, record the run, close it (or, not recorded, just run it); `phase`
        hears what the run waits for meanwhile."""
        if not self.recorded:
            return await self.runtime.run()
        if phase is not None:
            phase("the event store to open")
        async with self.opened():
            if phase is not None:
                phase("the run to start")
            return await self.record()

    def kill(self, by: str) -> None:
        """Kill now; before the recording began, as it begins (the store holds the kill)."""
        if self._recorded is not None:
            self._recorded.kill(by)
        elif self.recorded:
            self._kill_before_recording = by
        else:
            self.runtime.kill(by=by)

    def abandon(self, by: str) -> bool:
        """Harder than a kill (`RecordedRun.abandon`); False once the run has ended."""
        return self._recorded is not None and self._recorded.abandon(by)

    def link(self) -> LocalLink:
        """The console's way to this run."""
        return LocalLink(self)

    def cleanup(self) -> None:
        if self._prepared is not None:
            self._prepared.cleanup()
