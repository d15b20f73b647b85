"""Driving the console in tests: build an app on a prepared run and wait on conditions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from textual.app import App
from textual.pilot import Pilot

from loopdeck.core.approvals import Approver
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.session import RunSession
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.run_screen import RunScreen


def console_app(
    env: str | Path,
    script: str,
    *,
    approver: Approver | None = None,
    theme: str | None = None,
    frozen: datetime | None = None,
    answers: bool = False,
    **budget: Any,
) -> LoopdeckApp:
    """`frozen`: the instant the console's clock stands at (the countdowns it shows)."""
    queue = ApprovalQueue()
    options = RunOptions(
        env=str(env), script=script, budget_overrides=budget, run_id="run0test0001"
    )
    prepared = prepare_run(options, approver=approver or queue, answerer=queue if answers else None)
    now: Callable[[], datetime] = lambda: datetime.now(UTC)  # noqa: E731
    if frozen is not None:
        at = frozen
        now = lambda: at  # noqa: E731
    session = RunSession.adopted(prepared, queue)
    return LoopdeckApp(ConsoleStart.for_run(session), theme_name=theme, now=now)


def run_screen(app: LoopdeckApp) -> RunScreen | None:
    for screen in app.screen_stack:
        if isinstance(screen, RunScreen):
            return screen
    return None


async def wait_until(
    pilot: Pilot[Any], condition: Callable[[], bool], timeout: float = 60.0
) -> None:
    waited = 0.0
    while not condition():
        if waited >= timeout:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.05)
        waited += 0.05


def counted_frames(screen: Any) -> list[int]:
    """One item for each frame the screen paints from now on (its `flush` counted)."""
    frames: list[int] = []
    flush = screen.flush

    def counted_flush() -> None:
        frames.append(1)
        flush()

    screen.flush = counted_flush
    return frames


def finished(app: LoopdeckApp) -> bool:
    screen = run_screen(app)
    return screen is not None and screen.outcome is not None


async def start_from_fleet(pilot: Pilot[Any], app: LoopdeckApp, env: str, script: str) -> Any:
    """`n` on the fleet, choose env/script in the launcher, enter: the new run's screen."""
    from loopdeck.tui.launcher import LauncherScreen

    await pilot.press("n")
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, LauncherScreen) and app.screen.listed,
    )
    chooser = app.screen
    chooser.query_one("#launcher-list").highlighted = chooser.index_of(env, script)
    await pilot.press("enter")
    await wait_until(pilot, lambda: bool(app.local_runs))
    return list(app.local_runs.values())[-1]


# Textual keeps two things a test reads with no public way to read them; these helpers are
# the one place that reaches into it, so a Textual that moves them breaks here alone.


def notices(app: App[Any]) -> list[str]:
    """The texts of the toasts the app holds now (posted with `notify`, not yet expired or
    cleared). Textual offers `notify` and `clear_notifications`, but no way to read them:
    `App._notifications` is its private store of them."""
    return [str(notice.message) for notice in app._notifications]


def screen_lines(app: App[Any]) -> list[str]:
    """Every line of cells the top screen sends to the terminal, as text (borders, titles,
    toasts, the layers over one another). Textual's public `export_screenshot` gives SVG;
    the text is the screen compositor's (`Screen._compositor`) render of its strips."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def screen_text(app: App[Any]) -> str:
    """`screen_lines` as one text."""
    return "\n".join(screen_lines(app))


async def grant_any_arguments(pilot: Pilot[Any], dialog: Any) -> None:
    """`g` in the approval dialog, then "any arguments", no limit: approved with the grant."""
    await pilot.press("g")
    await wait_until(
        pilot, lambda: dialog.granting is not None and dialog.granting.scopes.has_focus
    )
    await pilot.press("down", "enter")
