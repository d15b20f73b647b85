"""The run screen's dialogs when their request goes first: withdrawn before the dialog's own
mount ran, or decided here but lost to another decider (still listed until the runtime takes
the winner)."""

from datetime import UTC, datetime

from conftest import SAMPLES
from console_helpers import console_app, finished, notices, run_screen, wait_until
from textual.app import App

from loopdeck.core.approvals import ApprovalDecision, request_for
from loopdeck.core.states import StopReason
from loopdeck.operator import run_loop
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.question_dialog import QuestionDialog

SIZE = (160, 48)


def _request():
    return request_for(
        run_id="run1", call_id="call1", tool="update_delivery_address", args={"order": "A1"},
        state_hash="s1", fingerprint="f1", plan_step=None, ttl_s=300,
    )  # fmt: skip


async def test_a_dialog_removed_before_its_mount_ran_leaves_the_console_running() -> None:
    """Pushed and popped in one step (its request decided elsewhere as it was offered): its
    mount finds no children and must not look for any."""
    app = App()
    async with app.run_test() as pilot:
        for dialog in (
            ApprovalDialog(_request(), 1, "write", lambda: datetime.now(UTC)),
            QuestionDialog("q1", "Which address?"),
        ):
            app.push_screen(dialog)
            app.pop_screen()
            await pilot.pause()
            await pilot.pause()
            assert app.is_running and app.screen is not dialog
    assert app.return_code in (0, None)


async def test_a_decision_that_lost_the_race_is_not_offered_again() -> None:
    """The store had another decider's word first: the request stays listed until the runtime
    takes the winner, and this console does not ask for it again meanwhile."""
    app = console_app(SAMPLES / "order_support", "solve")
    lost: list[str] = []

    async def decide_lost(decision, tell) -> bool:
        lost.append(decision.call_id)
        return False  # decided by someone else; not yet reached the runtime

    app.session.queue.decide = decide_lost
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        call_id = app.screen.request.call_id
        await pilot.press("a")
        await wait_until(pilot, lambda: any("already decided" in said for said in notices(app)))
        screen = run_screen(app)
        assert lost == [call_id] and [p.call_id for p in screen.link.pending()] == [call_id]
        assert app.screen is screen  # the worker offered what is left: nothing
        winner = ApprovalDecision(call_id=call_id, approved=True, by="elsewhere")
        # The winner reaches the runtime, on the runs' loop (as the store's wait hands it).
        run_loop.call(app.session.queue.resolve, winner)
        await wait_until(pilot, lambda: finished(app))
        assert screen.outcome.stop_reason is StopReason.GOAL_MET
