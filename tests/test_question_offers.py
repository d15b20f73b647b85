"""A question is offered as it was asked: the run's link lists a question as the run asks it,
on the runs' own thread, before its `QuestionAsked` (its title, choices, evidence) reaches the
console's view. A dialog made from the listing alone put the guard's question as the agent's:
no choices, a text box with the focus, and the operator's `s` typed into it instead of
answering stop (the run then waited out the guard's minute and ended stalled)."""

from __future__ import annotations

from datetime import UTC, datetime

from console_helpers import notices, wait_until
from textual.app import App
from textual.screen import Screen
from textual.widgets import Input

from loopdeck.core.events import QuestionAsked
from loopdeck.core.loop_say import TITLE
from loopdeck.operator.entries import NotOffered
from loopdeck.operator.runview import RunView
from loopdeck.tui.approval_offers import ApprovalOffers
from loopdeck.tui.question_dialog import AnswerText, QuestionDialog

QUESTION = "c6 get_status() repeats a call from the same state. Answer `stop` or `nudge TEXT`."


class ListedQuestions:
    """The link as `ApprovalOffers` reads it: what the run is waiting on, and the answers."""

    def __init__(self) -> None:
        self.listed: list[tuple[str, str]] = []
        self.answers: list[tuple[str, str, str]] = []

    def pending(self) -> list[object]:
        return []

    def questions(self) -> list[tuple[str, str]]:
        return list(self.listed)

    async def answer(self, question_id: str, text: str, by: str, tell: object) -> bool:
        self.answers.append((question_id, text, by))
        self.listed = [(q, t) for q, t in self.listed if q != question_id]
        return True


def _guard_asks(question_id: str) -> QuestionAsked:
    return QuestionAsked(
        run_id="run0test0001",
        question_id=question_id,
        question=QUESTION,
        topic="loop",
        title=TITLE,
        choices=["stop", "nudge"],
    )


async def test_a_question_listed_before_its_asking_is_heard_waits_for_it() -> None:
    app = App()
    async with app.run_test(size=(120, 40)) as pilot:
        screen: Screen[None] = Screen()
        await app.push_screen(screen)
        heard: dict[str, QuestionAsked] = {}
        link = ListedQuestions()
        offers = ApprovalOffers(
            screen, link, lambda: datetime.now(UTC), put_off=lambda: None, asked=heard.get
        )
        link.listed = [("q2", QUESTION)]  # the run asked; its event is still on its way
        offers.offer_next()  # e.g. the previous answer's worker, as it ends
        await pilot.pause()
        assert app.screen is screen, "offered before its asking was heard"
        heard["q2"] = _guard_asks("q2")  # the event, then the queue's change that follows it
        offers.changed(RunView())
        dialog = app.screen
        assert isinstance(dialog, QuestionDialog) and dialog.question_id == "q2"
        assert dialog.choices == ("stop", "nudge") and dialog.answers_stop
        await wait_until(pilot, lambda: dialog.focused is not None)
        assert not isinstance(dialog.focused, Input)  # the single keys work at once
        dialog.answer_stop()  # what the console's `s` does over this dialog
        await wait_until(pilot, lambda: bool(link.answers))
        assert link.answers == [("q2", "stop", "console")]


async def test_an_agents_question_still_comes_as_a_text_box() -> None:
    """The agent's own question (no choices) is offered once heard too, with its box."""
    app = App()
    async with app.run_test(size=(120, 40)) as pilot:
        screen: Screen[None] = Screen()
        await app.push_screen(screen)
        asked = QuestionAsked(run_id="run0test0001", question_id="q1", question="Which order?")
        link = ListedQuestions()
        offers = ApprovalOffers(
            screen, link, lambda: datetime.now(UTC), put_off=lambda: None, asked={"q1": asked}.get
        )
        link.listed = [("q1", "Which order?")]
        offers.offer_next()
        dialog = app.screen
        assert isinstance(dialog, QuestionDialog) and dialog.choices == ()
        await wait_until(pilot, lambda: isinstance(dialog.focused, Input))
        await pilot.press(*"ORD-1042", "enter")
        await wait_until(pilot, lambda: bool(link.answers))
        assert link.answers == [("q1", "ORD-1042", "console")]


class RefusingLink(ListedQuestions):
    """A link whose answer path refuses words its question does not take, as the live links
    do (`links.refuse_unoffered`): nothing sent."""

    async def answer(self, question_id: str, text: str, by: str, tell: object) -> bool:
        if text != "stop":
            raise NotOffered(f"{question_id}: `stop` takes no words after it")
        return await super().answer(question_id, text, by, tell)


async def test_an_answer_its_question_does_not_take_is_said_and_the_question_offered_again() -> (
    None
):
    """`NotOffered` from the link is no background failure: said as why the answer was not
    taken, and the question's dialog comes back (it was lost before)."""
    app = App()
    async with app.run_test(size=(120, 40)) as pilot:
        screen: Screen[None] = Screen()
        await app.push_screen(screen)
        link = RefusingLink()
        offers = ApprovalOffers(
            screen, link, lambda: datetime.now(UTC), put_off=lambda: None,
            asked={"q2": _guard_asks("q2")}.get,
        )  # fmt: skip
        link.listed = [("q2", QUESTION)]
        offers.offer_next()
        dialog = app.screen
        assert isinstance(dialog, QuestionDialog)
        dialog.dismiss(AnswerText("q2", "nudge look again"))
        await wait_until(pilot, lambda: any("answer not taken" in t for t in notices(app)))
        [said] = [t for t in notices(app) if "answer not taken" in t]
        assert said.startswith("answer not taken: q2: `stop` takes no words"), said
        await wait_until(pilot, lambda: isinstance(app.screen, QuestionDialog))
        again = app.screen
        assert isinstance(again, QuestionDialog) and again.question_id == "q2"
        assert link.answers == []
