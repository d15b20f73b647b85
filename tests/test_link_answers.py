"""A console's answer to a run's question goes through the check every front end's does
(`entries.not_offered`), in-process too: words with a choice that takes none ("allow foo"),
a choice it does not offer, a budget's "continue 50", are refused by name (`NotOffered`) and
nothing reaches the run or the store."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from loopdeck.core.events import EventBus, QuestionAsked
from loopdeck.operator.entries import NotOffered
from loopdeck.operator.links import LocalLink
from loopdeck.operator.store_link import StoreLink
from loopdeck.store.opening import open_store

GUARD = ["stop", "nudge", "allow"]
BUDGET = ["continue", "raise", "stop"]


class Queue:
    """A console's queue: what reached it."""

    def __init__(self) -> None:
        self.replies: list[str] = []

    def subscribe(self, listener: Any) -> Any:
        return lambda: None

    def pending(self) -> list[Any]:
        return []

    def questions(self) -> list[Any]:
        return []

    async def reply(self, question_id: str, text: str, by: str, tell: Any) -> bool:
        self.replies.append(f"{question_id}: {text}")
        return True


async def test_a_local_runs_answer_its_question_does_not_take_is_refused_by_name() -> None:
    bus, queue = EventBus(), Queue()

    class Session:
        runtime = SimpleNamespace(model=None, env_thread=SimpleNamespace(), bus=bus)

    Session.queue = queue  # type: ignore[attr-defined]
    link = LocalLink(Session())  # type: ignore[arg-type]
    bus.emit(QuestionAsked, run_id="r1", question_id="q1", question="again?", topic="loop",
             choices=GUARD)  # fmt: skip
    bus.emit(QuestionAsked, run_id="r1", question_id="q2", question="tokens?", topic="budget",
             choices=BUDGET)  # fmt: skip
    for question_id, text, said in (
        ("q1", "allow foo", "`allow` takes no words"),
        ("q1", "maybe", "'maybe' is not one of them"),
        ("q2", "continue 50", "`continue` takes no words"),
    ):
        with pytest.raises(NotOffered, match=f"^{question_id}: ") as refused:
            await link.answer(question_id, text, "console")
        assert said in str(refused.value), refused.value
    assert queue.replies == []
    assert await link.answer("q1", "allow", "console")
    assert await link.answer("q2", "continue", "console")
    assert queue.replies == ["q1: allow", "q2: continue"]


async def test_an_attached_runs_answer_its_question_does_not_take_is_refused_by_name(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    store = await open_store(db, create=True)
    try:
        link = StoreLink(db, "r1")
        link.store = store
        asked = QuestionAsked(run_id="r1", seq=3, question_id="q1", question="again?",
                              topic="loop", choices=GUARD)  # fmt: skip
        link._note(asked)  # as it follows the run's events
        with pytest.raises(NotOffered, match=r"^q1: .*`allow` takes no words"):
            await link.answer("q1", "allow foo", "console")
        assert await store.fetchall("SELECT 1 FROM commands") == []
    finally:
        await store.close()
