"""The run's questions to its operator: the model's `ask_user`, a budget past `pause_at`, a
detected loop. The run moves to `awaiting_answer`, says the question (`QuestionAsked`),
makes it durable, and waits for the `Answerer` on the operator's clock."""

from __future__ import annotations

from collections.abc import Awaitable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

from loopdeck.caps import Cap
from loopdeck.core.approvals import Answer, Answerer
from loopdeck.core.config import RunConfig
from loopdeck.core.events import Emit, QuestionAnswered, QuestionAsked
from loopdeck.core.states import RunState
from loopdeck.core.text import capped
from loopdeck.core.timeouts import bounded

T = TypeVar("T")
ANSWER_CAP = 4000


@dataclass(frozen=True, slots=True)
class Asking:
    """How a question is put to the operator: who asks (`title`), the answers understood
    (`choices`, empty for free text) and what they decide on (`evidence`); a budget's pause
    names its `cap` and what it has `used` (a raised cap must be above it)."""

    title: str = "The agent asks"
    choices: tuple[str, ...] = ()
    evidence: tuple[tuple[str, str], ...] = ()
    cap: Cap | None = None
    used: float | None = None


AGENT_ASKS = Asking()


class QuestionHost(Protocol):
    """What a question needs from the run that asks it."""

    config: RunConfig
    answerer: Answerer | None

    def move(self, target: RunState) -> None: ...
    @property
    def emit(self) -> Emit: ...
    async def flush_journal(self) -> None: ...
    def operator_time(self, why: str) -> AbstractContextManager[None]: ...
    async def interruptible(self, awaitable: Awaitable[T], *, by_cancel: bool = False) -> T: ...


class Questions:
    """Asks the operator, one question at a time, each with its id (`q1`, `q2`, …)."""

    def __init__(self, host: QuestionHost) -> None:
        self.rt = host
        self.asked = 0

    async def ask(
        self,
        question: str,
        topic: str = "ask_user",
        timeout_s: float | None = None,
        asking: Asking = AGENT_ASKS,
    ) -> Answer | None:
        """`awaiting_answer`: the run waits for the operator's answer, on the operator's time.
        None when `timeout_s` passed first (recorded as answered by `timeout`, no text)."""
        rt = self.rt
        assert rt.answerer is not None
        self.asked += 1
        question_id = f"q{self.asked}"
        rt.move(RunState.AWAITING_ANSWER)
        acts_at = None if timeout_s is None else datetime.now(UTC) + timedelta(seconds=timeout_s)
        rt.emit(
            QuestionAsked,
            run_id=rt.config.run_id,
            question_id=question_id,
            question=question,
            topic=topic,
            title=asking.title,
            choices=list(asking.choices),
            evidence=list(asking.evidence),
            cap=asking.cap,
            used=asking.used,
            acts_at=acts_at,
        )
        await rt.flush_journal()  # the question is visible to other processes from here
        waiting = rt.answerer.answer(rt.config.run_id, question_id, question)
        with rt.operator_time("answer"):
            try:
                answer: Answer | None = await rt.interruptible(
                    bounded(waiting, timeout_s), by_cancel=True
                )
            except TimeoutError:
                answer = None
        if answer is None:
            rt.emit(
                QuestionAnswered,
                run_id=rt.config.run_id,
                question_id=question_id,
                answer="",
                by="timeout",
            )
            rt.move(RunState.DECIDING)
            return None
        text = capped(answer.text, ANSWER_CAP)
        rt.emit(
            QuestionAnswered,
            run_id=rt.config.run_id,
            question_id=question_id,
            answer=text,
            by=answer.by,
        )
        rt.move(RunState.DECIDING)
        return Answer(text=text, by=answer.by)
