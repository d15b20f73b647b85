"""What a RunScreen is attached to: a run in this process, or one living in the store (a
finished one: `ReplayLink`, in `operator/replay_link.py`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import Event, OutcomeResolved, QuestionAsked
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.runtime import Runtime
from loopdeck.core.unknown_outcomes import Unresolvable
from loopdeck.operator import records, run_loop
from loopdeck.operator.approval_queue import ApprovalQueue, StoreBackedQueue
from loopdeck.operator.replay_link import ReplayLink as ReplayLink
from loopdeck.operator.replay_link import load_events as load_events
from loopdeck.operator.run_loop import Outbox
from loopdeck.store import deciding
from loopdeck.tuning.loop_idle import nothing_else_due

Listener = Callable[[], None]
Tell = deciding.Tell
EventSink = Callable[[Event], None]


class RunLink(Protocol):
    """The console's only way to a run: events in, commands and decisions out."""

    runtime: Runtime | None

    def subscribe(self, sink: EventSink) -> Callable[[], None]: ...
    def on_approvals(self, listener: Listener) -> Callable[[], None]: ...
    async def drive(self) -> RunOutcome | None: ...
    def pending(self) -> list[ApprovalRequest]: ...
    async def decide(self, decision: ApprovalDecision, tell: Tell = ...) -> bool:
        """The operator's decision, through the store when recorded (`store/deciding.py`): a
        held lock is waited out, `tell` hearing of it; a StoreError (a dead runner, the wait's
        bound) leaves it pending."""
        ...

    def questions(self) -> list[tuple[str, str]]: ...
    async def answer(self, question_id: str, text: str, by: str, tell: Tell = ...) -> bool:
        """True if this answer was the one recorded, False if the question was answered;
        `NotOffered` (nothing sent) if the question does not take it (`refuse_unoffered`)."""
        ...

    def stop(self, by: str) -> None: ...
    def kill(self, by: str) -> None: ...
    def pause(self, by: str) -> None: ...
    def resume(self, by: str) -> None: ...
    async def pause_or_resume(self, verb: str, by: str, tell: Tell = ...) -> str | None:
        """`pause` or `resume` sent (None), or why the run would do nothing with it, judged
        as `loopdeck pause/resume` judges it (`deciding.pause_refusal`)."""
        ...

    def message(self, text: str, by: str) -> None:
        """The operator's words to the agent, heard before the model's next turn."""
        ...

    async def revoke(self, grant_id: str, by: str) -> str | None:
        """A standing grant withdrawn: None when done or sent, else why not."""
        ...

    async def resolve(self, call_id: str, applied: bool, by: str, tell: Tell = ...) -> str | None:
        """The operator's word on a write whose outcome is unknown, through the store when
        recorded (one winner): None when it is the one taken, else why not."""
        ...

    def risk_of(self, tool: str) -> str: ...


class LocalRun(Protocol):
    """A run of this process, as its console drives it (`operator.session.RunSession`)."""

    @property
    def runtime(self) -> Runtime: ...
    @property
    def queue(self) -> ApprovalQueue: ...
    @property
    def location(self) -> records.Location | None: ...  # where it is recorded
    async def run(self, phase: Callable[[str], None]) -> RunOutcome: ...
    def kill(self, by: str) -> None: ...
    def listen(self, listener: Callable[[str], None]) -> Callable[[], None]: ...


class LocalLink:
    """A run driven by this process (its session): recorded to the store when the session
    has a location, decided in this console's queue.

    The run runs on the runs' own thread and loop (`operator.run_loop`), never the caller's:
    what it tells (its events, its queue's changes, its recording's failures) reaches each
    listener on the loop it subscribed from, in the order told (`Outbox`); what the operator
    sends (commands, decisions) is done on the runs' loop."""

    def __init__(self, session: LocalRun) -> None:
        self.session = session
        self.runtime: Runtime | None = session.runtime
        self.queue = session.queue
        # A model with a library to load (LiteLLM's) prepares before the run starts; an ACP
        # agent's own model has nothing to load here.
        self.prepare_model = getattr(session.runtime.model, "prepare", None)
        loads = self.prepare_model is not None
        self.phase = "the model library (LiteLLM) to load" if loads else "the run to start"
        # Set once the run and its recording are over: the session's store is closed.
        self.recording_over = asyncio.Event()
        # The queue as the runs' thread last saw it: read from any thread without walking
        # the queue while it changes.
        self._pending: list[ApprovalRequest] = []
        self._questions: list[tuple[str, str]] = []
        self._outboxes: dict[asyncio.AbstractEventLoop | None, Outbox] = {}
        # The questions asked, by id: the answers each takes (read and written on the runs'
        # loop, where the bus tells them and an answer is judged).
        self._asked: dict[str, QuestionAsked] = {}
        session.runtime.bus.subscribe(self._heard)
        if self.queue is not None:
            self.queue.subscribe(self._queue_changed)
            self._queue_changed()

    @property
    def _rt(self) -> Runtime:
        assert self.runtime is not None
        return self.runtime

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        told = self._outbox()
        return self._rt.bus.subscribe(lambda event: told.tell(sink, event))

    def on_approvals(self, listener: Listener) -> Callable[[], None]:
        told = self._outbox()
        return self.queue.subscribe(lambda: told.tell(listener))

    def on_failure(self, listener: Callable[[str, str], None]) -> Callable[[], None]:
        """What the run's recording says while it goes on (its commands from other terminals
        unreadable, spilled events brought back, events it could not save), as `StoreLink`'s
        failures are told."""
        told = self._outbox()
        return self.session.listen(lambda message: told.tell(listener, message, ""))

    def _outbox(self) -> Outbox:
        """What the run tells the caller's loop: one outbox a loop, so its events, its
        queue's changes and its failures are heard there in the order told."""
        loop = _running_loop()
        if loop not in self._outboxes:
            self._outboxes[loop] = Outbox(loop)
        return self._outboxes[loop]

    async def drive(self) -> RunOutcome | None:
        try:
            return await run_loop.run(self._drive())
        finally:  # what the run told is heard before its outcome: its stop drawn with it
            self.hear_now()

    def hear_now(self) -> None:
        """What the run told the caller's loop and is still on its way, heard now (a frame
        about to be drawn shows all that happened, not what the last delivery brought)."""
        told = self._outboxes.get(_running_loop())
        if told is not None:
            told.deliver_now()

    async def _drive(self) -> RunOutcome | None:
        if self.prepare_model is not None:  # its import (off the UI's path) before the run's
            await self.prepare_model()
            self.phase = "the run to start"
        # Quick env code waited for only when no other run of the loop has work due.
        self._rt.env_thread.only_when_idle = nothing_else_due
        try:
            return await self.session.run(self._waiting_for)
        finally:
            self.recording_over.set()

    def _waiting_for(self, phase: str) -> None:
        self.phase = phase

    def _queue_changed(self) -> None:
        self._pending = [item.request for item in self.queue.pending()]
        self._questions = [(q.question_id, q.question) for q in self.queue.questions()]

    def pending(self) -> list[ApprovalRequest]:
        return list(self._pending)

    async def decide(self, decision: ApprovalDecision, tell: Tell = deciding.untold) -> bool:
        told = _told_here(tell)
        return await run_loop.run(self._decided(self.queue.decide(decision, told)))

    def questions(self) -> list[tuple[str, str]]:
        return list(self._questions)

    def _heard(self, event: Event) -> None:
        if isinstance(event, QuestionAsked):
            self._asked[event.question_id] = event

    async def answer(
        self, question_id: str, text: str, by: str, tell: Tell = deciding.untold
    ) -> bool:
        return await run_loop.run(self._answered(question_id, text, by, _told_here(tell)))

    async def _answered(self, question_id: str, text: str, by: str, tell: Tell) -> bool:
        refuse_unoffered(self._asked.get(question_id), text)
        return await self._decided(self.queue.reply(question_id, text, by, tell))

    async def _decided(self, deciding: Awaitable[bool]) -> bool:
        """A decision taken on the runs' loop; the queue read again before the caller hears
        it (the decided request is no longer pending)."""
        try:
            return await deciding
        finally:
            self._queue_changed()

    def stop(self, by: str) -> None:
        run_loop.call(self._rt.cancel, True, by)

    def kill(self, by: str) -> None:
        run_loop.call(self.session.kill, by)

    def pause(self, by: str) -> None:
        run_loop.call(self._rt.pause, by)

    def resume(self, by: str) -> None:
        run_loop.call(self._rt.resume, by)

    async def pause_or_resume(self, verb: str, by: str, tell: Tell = deciding.untold) -> str | None:
        """Judged and done on the runs' loop, by the run's own control (it never lags)."""
        rt = self._rt

        async def judged() -> str | None:
            why = deciding.pause_refusal(rt.config.run_id, verb, rt.control.paused)
            if why is None:
                (rt.pause if verb == "pause" else rt.resume)(by)
            return why

        return await run_loop.run(judged())

    def message(self, text: str, by: str) -> None:
        run_loop.call(self._rt.message, text, by)

    async def revoke(self, grant_id: str, by: str) -> str | None:
        return await run_loop.run(self._revoke(grant_id, by))

    async def _revoke(self, grant_id: str, by: str) -> str | None:
        return self._rt.revoke(grant_id, by=by)

    async def resolve(
        self, call_id: str, applied: bool, by: str, tell: Tell = deciding.untold
    ) -> str | None:
        return await run_loop.run(self._resolve(call_id, applied, by, _told_here(tell)))

    async def _resolve(self, call_id: str, applied: bool, by: str, tell: Tell) -> str | None:
        if not isinstance(self.queue, StoreBackedQueue):
            try:
                self._rt.resolve(call_id, applied, by=by)
            except Unresolvable as exc:
                return str(exc)
            return None
        run_id = self._rt.config.run_id
        if self._rt.outcome is None:  # live: the store takes it first, the runner hears it
            store = self.queue.recording.store
            return await deciding.resolve(store, run_id, call_id, applied=applied, by=by, tell=tell)
        # Ended: its connection closes with its recording. The store is opened again, as
        # `loopdeck resolve` opens it, and the event it writes is shown here.
        await self.recording_over.wait()
        made = await records.resolve_ended(
            self.session.location, run_id, call_id, applied=applied, by=by, tell=tell
        )
        if isinstance(made, OutcomeResolved):
            self._rt.bus.publish(made)
            return None
        return made

    def risk_of(self, tool: str) -> str:
        spec = self._rt.tools.get(tool)
        return spec.risk if spec else "write"


def refuse_unoffered(asked: QuestionAsked | None, text: str) -> None:
    """`NotOffered`, nothing sent, when the question `asked` does not take `text` (words with
    a choice that takes none, none of its choices, a cap its run would refuse): the check
    every front end's answer goes through (`entries.not_offered`)."""
    if asked is None:
        return
    if problem := records.not_offered(asked.choices, text, asked.cap, asked.used):
        raise records.NotOffered(f"{asked.question_id}: {problem}")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The loop a listener subscribes from (told there), if any (else told at once)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _told_here(tell: Tell) -> Tell:
    """`tell`, heard on the caller's loop when the runs' thread says it (a held lock)."""
    told = Outbox(_running_loop())
    return lambda said: told.tell(tell, said)
