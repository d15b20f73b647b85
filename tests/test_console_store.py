"""Consoles on runs that live in the store: attach to a live one, replay a finished one."""

import pytest
from conftest import SAMPLES
from console_helpers import wait_until
from store_helpers import last_json, loopdeck, start_runner, wait_for_pending

from loopdeck.operator.links import ReplayLink
from loopdeck.operator.store_link import StoreLink
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.replay import ReplayScreen
from loopdeck.tui.run_screen import RunScreen

SIZE = (160, 48)


def _screen(app, kind=RunScreen):
    return next((s for s in app.screen_stack if isinstance(s, kind)), None)


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_attach_approves_a_headless_run_and_sees_it_finish(db) -> None:
    runner = start_runner(SAMPLES / "order_support", "solve", db, "--approve", "wait")
    try:
        pending = await wait_for_pending(db)
        app = LoopdeckApp(ConsoleStart.for_link(StoreLink(db, pending["run_id"])))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
            request = app.screen.request
            assert request.tool == "update_delivery_address"
            assert request.fingerprint and request.state_hash  # the full request, from its event
            assert request.plan_step.startswith("3.")
            await pilot.press("a")
            screen = _screen(app)
            await wait_until(pilot, lambda: screen.view.stop_reason is not None)
            assert screen.view.stop_reason == "goal_met"
            assert screen.view.env == "order_support"
            assert len(screen.view.calls) == 3
        out, _ = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert last_json(out)["stop_reason"] == "goal_met"


@pytest.mark.slow
async def test_attach_stop_key_cancels_the_remote_run(tmp_path) -> None:
    db = tmp_path / "s.db"
    runner = start_runner(SAMPLES / "order_support", "solve", db, "--approve", "wait")
    try:
        pending = await wait_for_pending(db)
        app = LoopdeckApp(ConsoleStart.for_link(StoreLink(db, pending["run_id"])))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
            await pilot.press("s")
            screen = _screen(app)
            await wait_until(pilot, lambda: screen.view.stop_reason is not None)
            assert screen.view.stop_reason == "cancelled"
            assert app.screen is screen  # the withdrawn approval's dialog closed
        runner.communicate(timeout=60)
    finally:
        runner.kill()


@pytest.mark.slow
async def test_replay_steps_back_and_forth(db) -> None:
    done = loopdeck(
        "run", "service_outage", "--script", "wrong-guess", "--headless", "--json", db=db
    )
    assert done.stdout, done.stderr
    run_id = last_json(done.stdout)["run_id"]
    app = LoopdeckApp(ConsoleStart.for_link(ReplayLink(db, run_id)))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _screen(app, ReplayScreen) is not None)
        screen = _screen(app, ReplayScreen)
        await wait_until(pilot, lambda: screen.position > 0)
        total = screen.position
        assert screen.view.stop_reason == "stalled"
        assert [e.seq for e in screen.replay.events] == list(range(1, total + 1))
        assert [v.verdict for v in screen.view.findings.verdicts] == ["fail", "stalled"]
        await pilot.press("home")
        # the start is the first event: the header already names the run
        assert screen.position == 1 and screen.view.stop_reason is None
        assert run_id in str(screen.query_one("#run-header").render())
        assert "run_started" in str(screen.query_one("#calls").border_subtitle)
        await pilot.press("right", "right")
        assert screen.position == 3
        assert screen.view.state.value == "planning"
        await pilot.press("end")
        await pilot.press("left")
        assert screen.position == total - 1 and screen.view.stop_reason is None
        subtitle = str(screen.query_one("#calls").border_subtitle)
        assert f"event {total - 1} of {total}" in subtitle
        kind = screen.replay.events[total - 2].kind
        assert kind in subtitle
        # who decided each approval, shown with the call it decided
        assert screen.view.decided["c2"].startswith("approved by auto at ")
        screen.show_detail("c2")
        await pilot.pause()
        assert "approved by auto" in str(screen.query_one("#detail-body").render())
        await pilot.press("home", "q")  # left at its start: the farewell says how it ended
        await wait_until(pilot, lambda: bool(app.farewell))
    assert app.farewell.startswith(f"run {run_id} · stalled · replay: loopdeck replay {run_id}")


@pytest.mark.slow
async def test_attached_console_shows_a_killed_runner_as_crashed(tmp_path) -> None:
    import os
    import signal

    db = tmp_path / "s.db"
    runner = start_runner(SAMPLES / "order_support", "solve", db, "--approve", "wait")
    try:
        pending = await wait_for_pending(db)
        app = LoopdeckApp(ConsoleStart.for_link(StoreLink(db, pending["run_id"])))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
            os.kill(runner.pid, signal.SIGKILL)
            runner.wait(timeout=10)
            screen = _screen(app)
            await wait_until(pilot, lambda: screen.view.stop_reason is not None, timeout=10)
            assert screen.view.stop_reason == "crashed"
            assert app.screen is screen  # the dead run's approval was withdrawn
    finally:
        runner.kill()


async def test_a_console_run_can_be_approved_from_another_process(tmp_path) -> None:
    from loopdeck.operator.launch import RunOptions
    from loopdeck.operator.session import RunSession
    from loopdeck.store import queries
    from loopdeck.store.opening import open_store

    db = tmp_path / "s.db"
    session = RunSession(db, console=True)
    session.prepare(RunOptions(env=str(SAMPLES / "order_support"), script="solve"))
    app = LoopdeckApp(ConsoleStart.for_run(session))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        request = app.screen.request
        other = await open_store(db)
        try:
            won = await queries.decide(
                other, request.run_id, request.call_id, approved=True, by="cli:ops"
            )
        finally:
            await other.close()
        assert won
        screen = _screen(app)
        await wait_until(pilot, lambda: screen.outcome is not None)
        assert screen.outcome.stop_reason.value == "goal_met"
        # The dialog stays on the call decided elsewhere, saying by whom, until esc.
        dialog = app.screen
        assert isinstance(dialog, ApprovalDialog) and dialog.request == request
        await wait_until(pilot, lambda: "approved by cli:ops" in (dialog.gone_said or ""))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen)
        update = next(c for c in screen.outcome.calls if c.tool == "update_delivery_address")
        assert update.status.value == "executed"
    runs = last_json(loopdeck("runs", "--json", db=db).stdout)
    assert runs[0]["run_id"] == request.run_id and runs[0]["stop_reason"] == "goal_met"


@pytest.mark.slow
async def test_the_fleet_lists_stored_runs_and_replays_one(db) -> None:
    from loopdeck.tui.fleet_screen import FleetScreen

    done = loopdeck("run", "service_outage", "--script", "loop", "--headless", "--json", db=db)
    run_id = last_json(done.stdout)["run_id"]
    app = LoopdeckApp(ConsoleStart.for_fleet(db))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        fleet = app.screen
        await wait_until(pilot, lambda: run_id in fleet.fleet.rows)
        table = fleet.query_one("#fleet-table")
        await wait_until(pilot, lambda: run_id in table.run_ids)
        table.move_cursor(row=table.get_row_index(run_id))
        await pilot.press("enter")
        await wait_until(pilot, lambda: _screen(app, ReplayScreen) is not None)
        screen = _screen(app, ReplayScreen)
        await wait_until(pilot, lambda: screen.view.stop_reason is not None)
        assert screen.view.stop_reason == "stalled"
