"""What a RunScreen is attached to: a run in this process, or one living in the store (a
finished one: `ReplayLink`, in `operator/replay_link.py`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from loopdeck.core.approvals import ApprovalRequest
from loopdeck.core.events import EventBase
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.runtime import Runtime
from loopdeck.llm.loader import litellm_module
from loopdeck.operator.approval_queue import ApprovalQueue, StoreBackedQueue
from loopdeck.operator.launch import PreparedRun
from loopdeck.operator.replay_link import ReplayLink as ReplayLink
from loopdeck.operator.replay_link import load_events as load_events
from loopdeck.store import deciding
from loopdeck.store.base import Location
from loopdeck.store.opening import open_store
from loopdeck.store.runner import RecordedRun
from loopdeck.store.writer import EventWriter

Listener = Callable[[], None]
Tell = deciding.Tell
EventSink = Callable[[EventBase], None]


class RunLink(Protocol):
    """The console's only way to a run: events in, commands and decisions out."""

    runtime: Runtime | None

    def subscribe(self, sink: EventSink) -> Callable[[], None]: ...
    def on_approvals(self, listener: Listener) -> Callable[[], None]: ...
    async def drive(self) -> RunOutcome | None: ...
    def pending(self) -> list[ApprovalRequest]: ...
    async def decide(
        self, call_id: str, approved: bool, reason: str, by: str, tell: Tell = ...
    ) -> bool:
        """Through the store when recorded (`store/deciding.py`): a held lock is waited out,
        `tell` hearing of it; a StoreError (a dead runner, the wait's bound) leaves it pending."""
        ...

    def questions(self) -> list[tuple[str, str]]: ...
    async def answer(self, question_id: str, text: str, by: str, tell: Tell = ...) -> bool: ...
    def stop(self, by: str) -> None: ...
    def kill(self, by: str) -> None: ...
    def pause(self, by: str) -> None: ...
    def resume(self, by: str) -> None: ...
    def risk_of(self, tool: str) -> str: ...


class LocalLink:
    """A run driven by this process; recorded to the store when a path is given."""

    def __init__(
        self, prepared: PreparedRun, queue: ApprovalQueue, db_path: Location | None
    ) -> None:
        self.prepared = prepared
        self.runtime: Runtime | None = prepared.runtime
        self.queue = queue
        self.db_path = db_path
        self.phase = "the model library (LiteLLM) to load"
        self._recorded: RecordedRun | None = None
        # A kill before the recording began (LiteLLM still loading): handed to the recording,
        # so the store holds the kill and the run's every event.
        self._kill_before_recording: str | None = None

    @property
    def _rt(self) -> Runtime:
        assert self.runtime is not None
        return self.runtime

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        return self._rt.bus.subscribe(sink)

    def on_approvals(self, listener: Listener) -> Callable[[], None]:
        return self.queue.subscribe(listener)

    async def drive(self) -> RunOutcome | None:
        await asyncio.to_thread(litellm_module)  # LiteLLM's import stays off the UI's path
        self.phase = "the run to start"
        self._rt.env_thread.only_when_idle = True  # frames and keys come first
        if self.db_path is None:
            return await self._rt.run()
        self.phase = "the event store to open"
        store = await open_store(self.db_path)
        self.phase = "the run to start"
        try:
            writer = EventWriter(store, approve_mode="console")
            if isinstance(self.queue, StoreBackedQueue):
                self.queue.store, self.queue.writer = store, writer
            self._recorded = RecordedRun(store, self._rt, writer)
            if self._kill_before_recording is not None:
                self._recorded.kill(self._kill_before_recording)
            return await self._recorded.run()
        finally:
            await store.close()

    def pending(self) -> list[ApprovalRequest]:
        return [item.request for item in self.queue.pending()]

    async def decide(
        self, call_id: str, approved: bool, reason: str, by: str, tell: Tell = deciding.untold
    ) -> bool:
        return await self.queue.settle(call_id, approved, reason, by, tell)

    def questions(self) -> list[tuple[str, str]]:
        return [(q.question_id, q.question) for q in self.queue.questions()]

    async def answer(
        self, question_id: str, text: str, by: str, tell: Tell = deciding.untold
    ) -> bool:
        return await self.queue.settle_question(question_id, text, by, tell)

    def stop(self, by: str) -> None:
        self._rt.cancel(after_current_tools=True, by=by)

    def kill(self, by: str) -> None:
        if self._recorded is not None:
            self._recorded.kill(by)
        elif self.db_path is not None:
            self._kill_before_recording = by
        else:
            self._rt.kill(by=by)

    def pause(self, by: str) -> None:
        self._rt.pause(by=by)

    def resume(self, by: str) -> None:
        self._rt.resume(by=by)

    def risk_of(self, tool: str) -> str:
        spec = self._rt.tools.get(tool)
        return spec.risk if spec else "write"
