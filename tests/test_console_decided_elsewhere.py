"""A write decided elsewhere while its dialog is open on the run screen: the dialog stays on
that write and says who decided it; nothing typed there becomes a key of the next write,
whose dialog comes only once the operator leaves the first (esc)."""

from conftest import SAMPLES
from console_helpers import console_app, run_screen, screen_text, wait_until
from textual.widgets import Input

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.operator import run_loop
from loopdeck.tui.dialogs import ApprovalDialog

SIZE = (100, 30)


async def test_a_reason_typed_as_the_write_is_decided_elsewhere_never_decides_the_next() -> None:
    app = console_app(SAMPLES / "service_outage", "grant")
    decided: list[ApprovalDecision] = []
    queue = app.session.queue
    sent = queue.decide

    async def decide(decision, tell) -> bool:
        decided.append(decision)
        return await sent(decision, tell)

    queue.decide = decide
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        dialog = app.screen
        first = dialog.request.call_id
        assert first == "c1"
        await pilot.press("r")
        box = dialog.query_one("#reject-reason", Input)
        await wait_until(pilot, lambda: box.has_focus)
        await pilot.press(*"no")
        elsewhere = ApprovalDecision(call_id=first, approved=True, by="cli:ops")
        run_loop.call(queue.resolve, elsewhere)
        screen = run_screen(app)
        # The run goes on to its next write, waiting behind the dialog still open.
        await wait_until(
            pilot, lambda: any(p.call_id != first for p in screen.link.pending()), timeout=30
        )
        said = "c1 was approved by cli:ops"
        await wait_until(pilot, lambda: said in screen_text(app) or app.screen is not dialog)
        assert app.screen is dialog, "the dialog went as its write was decided elsewhere"
        await pilot.press(*" bad", "e", "a", "enter")
        assert app.screen is dialog and dialog.request.call_id == first
        assert box.value == "no badea"  # kept as typed, sent nowhere
        assert "No longer waiting" in screen_text(app)
        assert decided == []
        await pilot.press("escape")
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, ApprovalDialog) and app.screen is not dialog,
        )
        assert app.screen.request.call_id != first and not app.screen.gone_said
        assert decided == []


async def test_an_answer_typed_as_the_question_is_answered_elsewhere_is_sent_nowhere() -> None:
    """The question's dialog stays too, saying so: the letters typed next never reach the run
    screen's keys (`s` stop, `k` kill) nor the next write's dialog."""
    from loopdeck.core.approvals import Answer
    from loopdeck.tui.question_dialog import QuestionDialog

    app = console_app(SAMPLES / "order_support", "ask-then-act", answers=True)
    queue = app.session.queue
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(
            pilot,
            lambda: (
                isinstance(app.screen, QuestionDialog) and isinstance(app.screen.focused, Input)
            ),
        )
        dialog = app.screen
        box = dialog.query_one("#answer-text", Input)
        await pilot.press(*"ORD")
        elsewhere = Answer(text="ORD-1042", by="cli:ops")
        run_loop.call(queue._resolve_question, dialog.question_id, elsewhere)
        screen = run_screen(app)
        await wait_until(pilot, lambda: screen.link.pending(), timeout=30)  # the run went on
        await wait_until(pilot, lambda: "answered elsewhere" in screen_text(app))
        assert app.screen is dialog, "the dialog went as its question was answered elsewhere"
        await pilot.press(*"-1042 sk", "enter")
        assert app.screen is dialog and box.value == "ORD-1042 sk"  # kept as typed
        assert screen.running and "No longer waiting" in screen_text(app)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        assert screen.running
