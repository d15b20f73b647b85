"""An Approver whose decisions come from a person, one pending request per write.

Each pending request carries an asyncio.Future; whoever decides resolves it. If the runtime
stops waiting (kill, stop, deadline) the wait is cancelled and the request withdrawn.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from loopdeck.core.approvals import Answer, ApprovalDecision, ApprovalRequest
from loopdeck.store import deciding
from loopdeck.store.approver import (
    Recording,
    answer_from_store,
    decision_from_store,
    flush_when_available,
    standing_in,
)

Listener = Callable[[], None]
Tell = deciding.Tell
T = TypeVar("T")


@dataclass
class PendingApproval:
    request: ApprovalRequest
    future: asyncio.Future[ApprovalDecision]


@dataclass
class PendingQuestion:
    run_id: str
    question_id: str
    question: str
    future: asyncio.Future[Answer]


class ApprovalQueue:
    """The console's queue of a run not recorded: its dialog's decision reaches the runtime."""

    def __init__(self) -> None:
        self._pending: OrderedDict[str, PendingApproval] = OrderedDict()
        self._questions: OrderedDict[str, PendingQuestion] = OrderedDict()
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    def pending(self) -> list[PendingApproval]:
        """Requests not yet decided (a decided one is gone once the runtime takes it)."""
        return [item for item in self._pending.values() if not item.future.done()]

    def _open(self, call_id: str) -> PendingApproval | None:
        """The request still waiting for its decision, if it is."""
        item = self._pending.get(call_id)
        return None if item is None or item.future.done() else item

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        """The Approver side: the runtime waits here for the operator's decision."""
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        self._pending[request.call_id] = PendingApproval(request, future)
        self._notify()
        try:
            return await future
        finally:
            self._pending.pop(request.call_id, None)
            self._notify()

    def resolve(self, decision: ApprovalDecision) -> bool:
        """The decision reaches the runtime's wait. False when the request is gone or already
        decided: exactly one decision wins."""
        item = self._open(decision.call_id)
        if item is None:
            return False
        item.future.set_result(decision)
        return True

    async def decide(self, decision: ApprovalDecision, tell: Tell) -> bool:
        """The operator's decision from this console (its dialog)."""
        return self.resolve(decision.with_reason())

    def questions(self) -> list[PendingQuestion]:
        return [item for item in self._questions.values() if not item.future.done()]

    def _open_question(self, question_id: str) -> PendingQuestion | None:
        item = self._questions.get(question_id)
        return None if item is None or item.future.done() else item

    async def answer(self, run_id: str, question_id: str, question: str) -> Answer:
        """The Answerer side: waits for `reply` (the console's question dialog)."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._questions[question_id] = PendingQuestion(run_id, question_id, question, future)
        self._notify()
        try:
            return await future
        finally:
            self._questions.pop(question_id, None)
            self._notify()

    def _resolve_question(self, question_id: str, answer: Answer) -> bool:
        item = self._open_question(question_id)
        if item is None:
            return False
        item.future.set_result(answer)
        return True

    async def reply(self, question_id: str, text: str, by: str, tell: Tell) -> bool:
        """The operator's answer from this console (its question dialog)."""
        return self._resolve_question(question_id, Answer(text=text, by=by))


class StoreBackedQueue(ApprovalQueue):
    """The console's queue when the run is recorded (`recording`, given at construction):
    a local key press and a remote command race, and the store's atomic update decides which
    one wins.

    A key press is taken by the store first (`decide`, in the console's worker: a held lock is
    waited out there, with the operator told, never in the runtime) and only then resolves the
    runtime's wait; a store error leaves the request pending."""

    def __init__(self, recording: Recording) -> None:
        super().__init__()
        self.recording = recording

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        store = self.recording.store
        return await self._race(super().ask(request), lambda: decision_from_store(store, request))

    async def standing(self, request: ApprovalRequest) -> ApprovalDecision | None:
        return await standing_in(self.recording, request)

    async def decide(self, decision: ApprovalDecision, tell: Tell) -> bool:
        item = self._open(decision.call_id)
        if item is None:
            return False
        decision = decision.with_reason()
        asked_at = item.request.requested_at.isoformat()  # the asking its dialog showed
        won = await deciding.decide(
            self.recording.store, item.request.run_id, decision, tell=tell, asked_at=asked_at
        )
        if won:  # the runtime's own wait on the store may have seen it first: either is this
            self.resolve(decision)
        return won  # lost: the winner reaches the runtime through that wait

    async def reply(self, question_id: str, text: str, by: str, tell: Tell) -> bool:
        item = self._open_question(question_id)
        if item is None:
            return False
        won = await deciding.answer(
            self.recording.store, item.run_id, text, by, question_id=question_id, tell=tell
        )
        if won:
            self._resolve_question(question_id, Answer(text=text, by=by))
        return won

    async def answer(self, run_id: str, question_id: str, question: str) -> Answer:
        """The console's dialog and `loopdeck answer` race; the store decides the winner."""
        store = self.recording.store
        return await self._race(
            super().answer(run_id, question_id, question),
            lambda: answer_from_store(store, run_id, question_id),
        )

    async def _race(self, local: Awaitable[T], from_store: Callable[[], Awaitable[T]]) -> T:
        """This console's answer and one recorded in the store by anyone race: either is
        already the store's (a local one resolves only once `decide` had the store take it)."""
        # The pending row is visible to other processes from here (a store that cannot take
        # writes for now is waited for: the run holds meanwhile).
        await flush_when_available(self.recording.writer)
        mine_task = asyncio.ensure_future(local)
        remote = asyncio.ensure_future(from_store())
        try:
            done, _ = await asyncio.wait({mine_task, remote}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (mine_task, remote):
                if not task.done():
                    task.cancel()
        return remote.result() if remote in done else mine_task.result()
