"""`m` in the console (issue 27): a box for the operator's words to the agent, from a run of
this console and from an attached one; hostile text escaped on screen, capped for the model."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest
from conftest import HARNESS, SAMPLES
from console_helpers import console_app, finished, notices, run_screen, wait_until
from store_helpers import last_json, start_runner, wait_for_pending
from test_markup_property import raw_controls, screen_text
from textual.widgets import Input

from loopdeck.core.events import OperatorMessage
from loopdeck.core.operator_messages import MESSAGE_CAP
from loopdeck.core.runtime import Runtime
from loopdeck.core.states import StopReason
from loopdeck.core.text import capped
from loopdeck.operator.store_link import StoreLink
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.dialogs import ApprovalDialog, ConfirmKillDialog
from loopdeck.tui.message_dialog import MessageDialog, unheard

SIZE = (160, 48)
SAID = "keep the note short"
HOSTILE = "\x1b[2J\x00\x07\u202eevil\u2066x\u2069 [b]bold[/] [0 " + "A" * 1_000_000
RAW = ("\x1b", "\x00", "\x07", "\u202e", "\u2066", "\u2069")


def _said(screen) -> list[str]:
    """The transcript's entries of the operator's messages, as drawn: title, then body."""
    return [e.text for e in screen.transcript.entries if e.title.startswith("the operator says")]


async def _type_message(pilot, app, text: str) -> None:
    await pilot.press("m")
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, MessageDialog) and isinstance(app.screen.focused, Input),
    )
    await pilot.press(*text, "enter")
    await wait_until(pilot, lambda: not isinstance(app.screen, MessageDialog))


@contextlib.contextmanager
def _next_turn_held(runtime: Runtime) -> Iterator[None]:
    """The run's next model turn waits at its checkpoint while this lasts: the typing ends
    before it, however long a loaded machine takes over the keys (the slow tool's 4 s are no
    bound on that). Nothing the keys do is held: a stop, a pause or a kill still lands."""
    typed = asyncio.Event()
    checkpoint = runtime.control.checkpoint

    async def after_the_typing() -> None:
        await typed.wait()
        await checkpoint()

    runtime.control.checkpoint = after_the_typing  # type: ignore[method-assign]
    try:
        yield
    finally:
        from loopdeck.operator import run_loop

        run_loop.call(typed.set)  # the run waits for it on the runs' own loop
        runtime.control.checkpoint = checkpoint  # type: ignore[method-assign]


async def test_m_sends_a_message_the_model_hears_before_its_next_turn() -> None:
    """While the slow tool runs, `m`: typed letters stay in the box (`s`, `p` and `k` do not
    stop, pause or kill), the next model turn hears it, the transcript says who and when."""
    events: list[OperatorMessage] = []
    app = console_app(HARNESS, "slow-long")
    async with app.run_test(size=SIZE) as pilot:
        screen = run_screen(app)
        await wait_until(
            pilot, lambda: screen is not None and screen.view.state.value == "executing"
        )
        screen.link.subscribe(
            lambda e: events.append(e) if isinstance(e, OperatorMessage) else None
        )
        runtime = screen.link.runtime
        with _next_turn_held(runtime):
            await _type_message(pilot, app, SAID)
            assert [(e.text, e.by) for e in events] == [(SAID, "console")]
            # No model turn since (the slow tool runs, or the next turn waits at its
            # checkpoint): unheard. Checked while held: once let go, the run's own loop may
            # hear it at once, the slow tool long done on a loaded machine.
            assert runtime.messages.heard == []
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        assert runtime.messages.heard == [SAID]  # heard by the turn that proposed the write
        await wait_until(pilot, lambda: bool(_said(screen)))
        [entry] = _said(screen)
        assert entry.startswith("the operator says · by console at ") and entry.endswith(SAID)
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        assert screen.outcome.stop_reason is StopReason.GOAL_MET


async def test_esc_sends_nothing_and_an_empty_box_is_said() -> None:
    app = console_app(HARNESS, "slow-long")
    async with app.run_test(size=SIZE) as pilot:
        screen = run_screen(app)
        await wait_until(
            pilot, lambda: screen is not None and screen.view.state.value == "executing"
        )
        await pilot.press("m")
        await wait_until(pilot, lambda: isinstance(app.screen, MessageDialog))
        await pilot.press("enter")
        assert isinstance(app.screen, MessageDialog)  # nothing typed: still open, said
        assert "Nothing typed" in str(app.screen.query_one("#message-problem").render())
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, MessageDialog))
        assert screen.link.runtime.messages.heard == [] and _said(screen) == []
        await pilot.press("k", "y")
        await wait_until(pilot, lambda: finished(app))
        assert _said(screen) == []


async def _box_over_the_waiting_run(pilot, app) -> MessageDialog:
    """The run waits for an approval (put off): `m`, and a few words typed in the box."""
    await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
    await pilot.press("escape", "m")
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, MessageDialog) and isinstance(app.screen.focused, Input),
    )
    await pilot.press(*"also sk")
    box = app.screen
    assert isinstance(box, MessageDialog) and box.query_one(Input).value == "also sk"
    return box


@pytest.mark.parametrize("keys", [("ctrl+s",), ("ctrl+k", "y")], ids=["stop", "kill"])
async def test_stopping_the_run_from_the_message_box_closes_it_unsent(keys) -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        screen = run_screen(app)
        await _box_over_the_waiting_run(pilot, app)
        await pilot.press(*keys)
        await wait_until(pilot, lambda: app.screen is screen)
        assert any("nobody will hear it" in text for text in notices(app))
        await wait_until(pilot, lambda: finished(app))
        assert screen.link.runtime.messages.heard == [] and _said(screen) == []


async def test_a_box_told_to_close_under_another_screen_closes_once_that_screen_goes() -> None:
    """The kill's answer may be heard while its question is still on top of the box: the box
    closes once it is on top again, however many refreshes that takes."""
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        screen = run_screen(app)
        box = await _box_over_the_waiting_run(pilot, app)
        question = ConfirmKillDialog()
        await app.push_screen(question)
        unheard(box)
        for _ in range(5):  # refreshes with the question on top: the box waits under it
            await pilot.pause()
        assert app.screen is question and box in app.screen_stack
        question.dismiss(False)
        await wait_until(pilot, lambda: app.screen is screen and box not in app.screen_stack)
        assert screen.link.runtime.messages.heard == []  # what it held was never sent


async def test_a_run_that_ends_under_the_message_box_is_said_ended_there() -> None:
    """The run ends on its own while the box is open: the box says so and keeps what is typed
    (no letter taken as a key), and sends nothing."""
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE) as pilot:
        screen = run_screen(app)
        box = await _box_over_the_waiting_run(pilot, app)
        screen.link.stop(by="elsewhere")
        await wait_until(pilot, lambda: finished(app) and box.ended)
        assert "ended" in str(box.query_one("#message-box").border_title)
        await pilot.press(*"q and t")
        assert app.screen is box and box.query_one(Input).value == "also skq and t"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen)
        assert screen.link.runtime.messages.heard == [] and _said(screen) == []


# Several seconds of subprocesses or console: in `make stress` (CI runs both).
@pytest.mark.slow
async def test_a_hostile_message_is_escaped_on_screen_and_capped_for_the_model() -> None:
    app = console_app(HARNESS, "slow-long")
    async with app.run_test(size=SIZE) as pilot:
        screen = run_screen(app)
        await wait_until(
            pilot, lambda: screen is not None and screen.view.state.value == "executing"
        )
        await pilot.press("m")
        await wait_until(pilot, lambda: isinstance(app.screen, MessageDialog))
        app.screen.query_one(Input).value = HOSTILE  # pasted
        await pilot.pause(0.1)
        assert raw_controls(screen_text(app)) == []  # the box shows it escaped
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        [heard] = screen.link.runtime.messages.heard
        assert heard == capped(HOSTILE, MESSAGE_CAP)
        await wait_until(pilot, lambda: bool(_said(screen)))
        [entry] = _said(screen)
        assert not any(raw in entry for raw in RAW)
        assert "\\u001b[2J\\u0000\\u0007\\u202eevil\\u2066x\\u2069 [b]bold[/] [0 AAA" in entry
        assert len(entry) < MESSAGE_CAP + 200
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert raw_controls(screen_text(app)) == []  # the run screen's transcript panel
        await pilot.press("t")  # the transcript screen draws it, as text
        await pilot.pause(0.2)
        assert raw_controls(screen_text(app)) == []
        await pilot.press("escape", "w", "a")
        await wait_until(pilot, lambda: finished(app))
        assert screen.outcome.stop_reason is StopReason.GOAL_MET


# Several seconds of subprocesses or console: in `make stress` (CI runs both).
@pytest.mark.slow
async def test_an_attached_console_sends_a_message_through_the_store(tmp_path) -> None:
    """`loopdeck attach`: `m` goes to the store, the runner takes it, and its event comes back
    to the attached console's transcript."""
    db = tmp_path / "s.db"
    runner = start_runner(SAMPLES / "order_support", "solve", db, "--approve", "wait")
    try:
        pending = await wait_for_pending(db)
        app = LoopdeckApp(ConsoleStart.for_link(StoreLink(db, pending["run_id"])))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
            await pilot.press("escape")
            screen = run_screen(app)
            await _type_message(pilot, app, SAID)
            await wait_until(pilot, lambda: bool(_said(screen)))
            [entry] = _said(screen)
            assert entry.startswith("the operator says · by console at ") and entry.endswith(SAID)
            await pilot.press("w")
            await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
            await pilot.press("a")
            await wait_until(pilot, lambda: screen.view.stop_reason is not None)
            assert screen.view.stop_reason == "goal_met"
        out, _ = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert last_json(out)["stop_reason"] == "goal_met"
