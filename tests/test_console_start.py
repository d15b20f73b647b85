"""The console paints first and prepares the run behind that frame (issue 11, target 6)."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import run_screen, wait_until

from loopdeck.core.approvals import AutoApprover
from loopdeck.core.scenario import ScenarioError
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.session import RunSession
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.preparing import PreparingScreen
from loopdeck.tui.run_screen import RunScreen


async def test_the_first_screen_is_up_while_the_run_is_prepared() -> None:
    release = threading.Event()

    def prepare():
        assert release.wait(30)
        options = RunOptions(env=str(SAMPLES / "service_outage"), script="solve")
        return RunSession.adopted(prepare_run(options, approver=AutoApprover()), ApprovalQueue())

    app = LoopdeckApp(ConsoleStart.for_preparing(prepare, "run service_outage"))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PreparingScreen))
        shown = str(app.screen.query_one("#preparing").render())
        assert "run service_outage" in shown and "preparing the run" in shown
        release.set()
        await wait_until(pilot, lambda: run_screen(app) is not None)
        screen = run_screen(app)
        await wait_until(pilot, lambda: screen.view.stop_reason is not None)
        assert screen.view.stop_reason == "goal_met"
    assert app.launch_error is None


async def test_a_run_that_cannot_be_prepared_closes_the_console_with_its_error() -> None:
    def prepare():
        raise ScenarioError("scenario.toml: no script named 'nope'")

    app = LoopdeckApp(ConsoleStart.for_preparing(prepare, "run service_outage --script nope"))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.launch_error is not None)
    assert isinstance(app.launch_error, ScenarioError)
    assert app.return_code == 2


async def test_q_while_preparing_leaves_at_once() -> None:
    release = threading.Event()

    def prepare():
        release.wait(30)
        raise ScenarioError("never used")

    app = LoopdeckApp(ConsoleStart.for_preparing(prepare, "run service_outage"))
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, PreparingScreen))
            await pilot.press("q")
            await wait_until(pilot, lambda: not app.is_running)
        assert app.return_code == 0
    finally:
        release.set()


def test_a_console_run_of_a_bad_scenario_exits_2_naming_it(cli, monkeypatch) -> None:
    """`loopdeck run` in the console: the error comes after the console closed, as before."""
    from loopdeck.cli import runs

    monkeypatch.setattr(runs, "no_terminal", lambda command: None)  # pytest's streams are not
    code, _, err = cli("run", "service_outage", "--script", "nope")
    assert code == 2
    assert "'nope'" in err and "wrong-guess" in err


class QuitAsPushed(LoopdeckApp):
    """Quits in the very step its run's screen is pushed (before it, or just after), as `q`
    pressed while the preparation ends does: the screen's mount runs once the app, closing,
    has removed its panels."""

    quit_first = False

    def push_screen(self, screen: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(screen, RunScreen):
            return super().push_screen(screen, *args, **kwargs)
        if self.quit_first:
            self.exit()
        pushed = super().push_screen(screen, *args, **kwargs)
        self.exit()
        return pushed


@pytest.mark.parametrize("quit_first", [False, True])
async def test_quitting_as_the_run_screen_is_pushed_leaves_without_a_fault(quit_first) -> None:
    def prepare():
        options = RunOptions(env=str(SAMPLES / "service_outage"), script="solve")
        return RunSession.adopted(prepare_run(options, approver=AutoApprover()), ApprovalQueue())

    app = QuitAsPushed(ConsoleStart.for_preparing(prepare, "run service_outage"))
    app.quit_first = quit_first
    async with app.run_test(size=(100, 30)) as pilot:  # a fault in a handler raises here
        await wait_until(pilot, lambda: not app.is_running)
    assert app.return_code == 0 and app.launch_error is None


class QuitAsScreenPushed(LoopdeckApp):
    """Quits in the very step a screen of `kind` is pushed (the fleet as the console opens on
    a store, the inbox on `i`): its mount runs once the app, closing, removed its widgets."""

    kind: type[Any] = object
    quit_first = False

    def push_screen(self, screen: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(screen, self.kind):
            return super().push_screen(screen, *args, **kwargs)
        if self.quit_first:
            self.exit()
        pushed = super().push_screen(screen, *args, **kwargs)
        self.exit()
        return pushed


@pytest.mark.parametrize("quit_first", [False, True])
@pytest.mark.parametrize("screen", ["fleet", "inbox"])
async def test_quitting_as_the_fleet_or_the_inbox_is_pushed_leaves_without_a_fault(
    tmp_path: Any, screen: str, quit_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopdeck.tui.fleet_screen import FleetScreen
    from loopdeck.tui.inbox import InboxScreen

    app = QuitAsScreenPushed(ConsoleStart.for_fleet(tmp_path / "s.db"))
    app.kind = FleetScreen if screen == "fleet" else InboxScreen
    app.quit_first = quit_first
    waited_out: list[str] = []
    module = sys.modules[app.kind.__module__]
    bounded = module.bounded

    async def bounded_seen(awaitable: Any, limit: float) -> Any:
        try:
            return await bounded(awaitable, limit)
        except TimeoutError:
            waited_out.append(app.kind.__name__)
            raise

    monkeypatch.setattr(module, "bounded", bounded_seen)
    async with app.run_test(size=(100, 30)) as pilot:  # a fault in a handler raises here
        if screen == "inbox":
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
            await pilot.press("i")
        await wait_until(pilot, lambda: not app.is_running)
    # Its store never opened (it never began following it): nothing to wait for as it leaves.
    assert app.return_code == 0 and waited_out == []
