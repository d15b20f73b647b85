"""What the operator can read: the transcript, the full stop, the rationale, honest time, and
quitting as a decision. Driven with Textual's pilot, as a person would."""

from datetime import UTC, datetime, timedelta

from conftest import SAMPLES
from console_helpers import console_app, finished, run_screen, start_from_fleet, wait_until
from textual.widgets import Input

from loopdeck.core.approvals import AutoApprover
from loopdeck.core.outcome import CallRecord
from loopdeck.core.states import StopReason
from loopdeck.operator.runview import RunView
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.dialogs import ApprovalDialog, ConfirmQuitDialog
from loopdeck.tui.panels import RunHeader
from loopdeck.tui.transcript_view import TranscriptLog, TranscriptScreen

SIZE = (160, 48)


def _text(widget) -> str:
    return str(widget.render())


def _dialog(app) -> bool:
    """The approval dialog is up and composed (queried only once its widgets exist)."""
    return isinstance(app.screen, ApprovalDialog) and bool(app.screen.query("#approval-meta"))


async def _open_transcript(pilot, app) -> TranscriptLog:
    """`t`, then the transcript's log once it is on screen."""
    await pilot.press("t")
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, TranscriptScreen) and bool(app.screen.query(TranscriptLog)),
    )
    return app.screen.query_one(TranscriptLog)


async def test_transcript_holds_the_whole_evidence_and_search_finds_it() -> None:
    app = console_app(SAMPLES / "service_outage", "wrong-guess", approver=AutoApprover())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        log = await _open_transcript(pilot, app)
        text = "\n".join(entry.text for entry in log.entries)
        assert "Bring the orders service back" in text  # the goal
        assert "1. Read the status." in text  # every plan
        assert "executor said" in text and "Step 1." in text  # the model's own words
        # get_status's full result: the live database named in last_error is not cut
        assert "orders-db-v2" in text and "last_error" in text
        assert "approved · c2 · by auto" in text  # who decided
        assert "guard · c5" in text and "review · round 2 · STALLED" in text
        assert "stop · STALLED" in text and "service unhealthy with db_url" in text
        await pilot.press("slash")
        await wait_until(pilot, lambda: isinstance(app.screen.focused, Input))
        await pilot.press(*"orders-db-v2", "enter")
        await wait_until(pilot, lambda: "match 1 of" in str(log.border_subtitle))
        assert "orders-db-v2" in log.lines[log.matches[0]].text
        found = len(log.matches)
        await pilot.press("n")
        assert f"match {min(2, found)} of {found}" in str(log.border_subtitle)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is run_screen(app))


async def test_transcript_follows_the_tail_until_scrolled_up() -> None:
    app = console_app(SAMPLES / "service_outage", "wrong-guess", approver=AutoApprover())
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        log = await _open_transcript(pilot, app)
        await wait_until(pilot, lambda: log.max_scroll_y > 0 and log.is_vertical_scroll_end)
        await pilot.press("up")
        assert not log.following
        before = log.scroll_y
        app.screen.add([log.entries[0]])  # a new entry does not pull the reader down
        await pilot.pause()
        assert log.scroll_y == before
        await pilot.press("end")
        await wait_until(pilot, lambda: log.following)


async def test_ask_user_question_and_goal_are_shown_in_full() -> None:
    app = console_app(SAMPLES / "order_support", "ask")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.pause(0.1)
        screen = run_screen(app)
        assert screen.outcome.stop_reason is StopReason.ASK_USER
        question = screen.outcome.detail
        assert len(question) > 30
        body = _text(screen.query_one("#outcome-body"))
        assert "ASK_USER" in body and question in body.replace("\n", " ")
        assert screen.view.goal.split()[0] in _text(screen.query_one("#goal"))


async def test_call_panel_takes_focus_and_scrolls_by_keys() -> None:
    app = console_app(SAMPLES / "service_outage", "solve", approver=AutoApprover())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        screen = run_screen(app)
        table = screen.query_one(CallsTable)
        table.focus()
        table.move_cursor(row=0)  # get_status: a result taller than the panel
        await pilot.pause(0.1)
        panel = screen.query_one("#detail")
        panel.focus()
        await pilot.pause()
        assert app.focused is panel and panel.virtual_size.height > panel.size.height
        await pilot.press("end")
        await wait_until(pilot, lambda: panel.scroll_y == panel.max_scroll_y)


async def test_approval_dialog_shows_rationale_and_the_reason_box_covers_nothing() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: _dialog(app))
        dialog = app.screen
        meta = _text(dialog.query_one("#approval-meta"))
        assert "why" in meta and dialog.request.rationale and dialog.request.rationale in meta
        assert "plan step" in meta and dialog.request.plan_step in meta
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(dialog.focused, Input))
        await pilot.pause()
        args = dialog.query_one("#approval-args").region
        reason = dialog.query_one("#reject-reason").region
        assert args.height > 0 and reason.height > 0
        assert not args.overlaps(reason)
        await pilot.press("escape")  # back from the reason, still deciding
        await wait_until(pilot, lambda: not dialog.query_one("#reject-reason").display)
        assert _dialog(app)


async def test_a_request_that_expires_undecided_is_asked_again_saying_why() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    runtime = app.prepared.runtime
    runtime.config = runtime.config.model_copy(update={"approval_ttl_s": 2.0})
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _dialog(app))
        await wait_until(
            pilot,
            lambda: (
                _dialog(app)
                and app.screen.request.asked_again != ""
                and bool(app.screen.query("#approval-again"))
            ),
        )
        again = _text(app.screen.query_one("#approval-again"))
        assert "Asked again" in again and "expired" in again


def test_calls_table_never_cuts_a_status_or_a_time() -> None:
    import asyncio

    from textual.app import App

    from loopdeck.tui.call_status import STATUS_LOOK

    class TableApp(App[None]):
        def compose(self):
            yield CallsTable()

    async def scenario(width: int) -> None:
        app = TableApp()
        async with app.run_test(size=(width, 30)) as pilot:
            table = app.query_one(CallsTable)
            view = RunView()
            table.fit(view)
            for n, status in enumerate(STATUS_LOOK, 1):
                call_id = f"c{n}"
                view.calls[call_id] = CallRecord(
                    call_id=call_id, round=1, tool="t" * 40, args={"a": "x" * 200}, risk="read",
                    fingerprint="f" * 16, state_hash="s" * 16, status=status,
                    duration_ms=123456.0, retries=3,
                )  # fmt: skip
                view.changed_calls.add(call_id)
            table.sync(view)
            await pilot.pause()
            for n, (label, _) in enumerate(STATUS_LOOK.values(), 1):
                line = table.render_line(n).text  # line 0 is the header
                assert label in line and "123,456 ↻3" in line, (width, line)

    for width in (80, 100, 200):
        asyncio.run(scenario(width))


async def test_q_on_a_live_run_asks_and_records_killed_not_crashed() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _dialog(app))
        await pilot.press("q")  # over the approval dialog, too
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmQuitDialog))
        await pilot.press("n")
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmQuitDialog))
        assert run_screen(app).running
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmQuitDialog))
        await pilot.press("y")
        await wait_until(pilot, lambda: not app.is_running)
    outcome = run_screen(app).outcome if run_screen(app) else None
    assert app.return_value == 0
    assert "run run0test0001 · killed · replay: loopdeck replay run0test0001" in app.farewell
    assert outcome is None or outcome.stop_reason is StopReason.KILLED
    assert app.prepared.runtime.outcome.stop_reason is StopReason.KILLED
    assert "killed by console (quit)" in app.prepared.runtime.outcome.detail


async def test_a_run_started_from_the_fleet_returns_to_it() -> None:
    from loopdeck.tui.app import LoopdeckApp
    from loopdeck.tui.fleet_screen import FleetScreen

    app = LoopdeckApp()
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        fleet = app.screen
        screen = await start_from_fleet(pilot, app, "order_support", "escalate")
        await wait_until(pilot, lambda: screen.outcome is not None)
        await pilot.press("q")
        await wait_until(pilot, lambda: app.screen is fleet)
        assert app.is_running
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running)
    assert app.return_value == 0


async def test_paused_shows_in_the_header_and_the_clock_is_held() -> None:
    app = console_app(SAMPLES / "service_outage", "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _dialog(app))
        screen = run_screen(app)
        await pilot.press("escape")
        await wait_until(pilot, lambda: screen.view.held == "approval")
        await pilot.press("p")
        await wait_until(pilot, lambda: "pausing" in _text(screen.query_one(RunHeader)))
        await pilot.press("w")
        await wait_until(pilot, lambda: _dialog(app))
        await pilot.press("a")
        await wait_until(pilot, lambda: screen.view.held == "paused")
        await wait_until(pilot, lambda: " paused " in _text(screen.query_one(RunHeader)))
        await pilot.press("p")
        await wait_until(pilot, lambda: _dialog(app))  # the next write, after the resume
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        assert screen.outcome.stop_reason is StopReason.GOAL_MET


def test_the_agents_clock_stands_still_while_held() -> None:
    view = RunView()
    at = datetime(2026, 1, 1, tzinfo=UTC)
    view.clock_at, view.agent_s, view.operator_s, view.held = at, 5.0, 2.0, "approval"
    assert view.times(at + timedelta(seconds=10)) == (5.0, 12.0)
    view.held = None
    assert view.times(at + timedelta(seconds=10)) == (15.0, 2.0)


async def test_palette_lists_the_runs_commands_first_and_hides_textuals_own() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _dialog(app))
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert titles[0].startswith("run: ")
        assert not {"Quit the application", "Screenshot", "Change theme"} & set(titles)
        assert titles.count("keys") == 1


async def test_before_the_first_plan_the_screen_says_what_it_waits_for() -> None:
    import asyncio

    app = console_app(SAMPLES / "order_support", "ask", approver=AutoApprover())
    runtime = app.prepared.runtime
    model, gate = runtime.model, asyncio.Event()

    class HeldPlanner:
        def __getattr__(self, name):
            return getattr(model, name)

        async def complete(self, request):
            if request.role == "planner":
                await gate.wait()
            return await model.complete(request)

    runtime.model = HeldPlanner()
    async with app.run_test(size=SIZE) as pilot:
        screen = run_screen(app)
        plan = screen.query_one("#plan")
        await wait_until(pilot, lambda: "waiting for the planner's reply" in _text(plan))
        from loopdeck.operator import run_loop

        run_loop.call(gate.set)  # the planner waits for it on the runs' own loop
        await wait_until(pilot, lambda: finished(app))
        assert "waiting for" not in _text(plan)


def test_the_call_panel_shows_a_files_content_as_its_lines() -> None:
    """Behind the approval's diff, the Calls panel's selected write: the file's lines, never
    one escaped JSON string."""
    from loopdeck.tui.panels import args_text

    shown = args_text({"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"})
    assert shown.splitlines() == [
        "{", '  "path": "calc.py"', "}", "content · 2 lines:", "def add(a, b):",
        "    return a + b",
    ]  # fmt: skip
    assert args_text({"path": "x", "content": 3}) == '{\n  "path": "x",\n  "content": 3\n}'


async def test_a_stop_detail_longer_than_its_room_says_so_and_scrolls() -> None:
    """At 80x24 the Stopped panel has one line: a longer detail says "more" on the
    panel's border; focused (shift+tab) and scrolled to its end, the border says nothing."""
    from loopdeck.tui.panels import OutcomePanel

    app = console_app(SAMPLES / "order_support", "typo", approver=AutoApprover())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        panel = run_screen(app).query_one(OutcomePanel)
        await wait_until(pilot, lambda: panel.max_scroll_y > 0)
        await wait_until(pilot, lambda: "more" in str(panel.border_subtitle))
        while app.focused is not panel:
            await pilot.press("shift+tab")
        await pilot.press("end")
        await wait_until(pilot, lambda: not panel.border_subtitle)
