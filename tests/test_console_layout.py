"""A runaway's frames repaint what changed and do not reflow the screen (issue 11, target 4).

A layout pass reflows and repaints the whole screen. The calls table and the transcript panel
grow in place (their size is the stylesheet's), and the Call panel holds its height while it
follows a live run's newest call: before, half of a runaway's frames had a layout pass.
"""

from __future__ import annotations

from itertools import count
from pathlib import Path
from typing import Any

import pytest
from console_helpers import counted_frames, run_screen, wait_until
from fake_models import calls
from pydantic import BaseModel
from textual.app import App, ComposeResult
from textual.screen import Screen

from loopdeck.core import AutoApprover, Budget, Environment, RunConfig, Runtime, tool
from loopdeck.core.events import CallStatus
from loopdeck.core.model import ModelReply, ModelRequest
from loopdeck.core.outcome import CallRecord
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import PreparedRun
from loopdeck.operator.session import RunSession
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.panels import CallDetail
from loopdeck.tui.run_screen import RunScreen
from loopdeck.tui.transcript_view import TranscriptLog


class PollArgs(BaseModel):
    i: int = 0


class PollingEnv(Environment):
    def snapshot(self) -> dict[str, Any]:
        return {"job": "running"}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return ["the job is still running"]

    @tool(args=PollArgs, exempt=True)
    def poll(self, args: PollArgs) -> dict[str, Any]:
        """Poll the job."""
        return {"status": "running", "i": args.i, "detail": {"queue": [1, 2, 3]}}


class Polling:
    """Polls for ever, a new argument each time."""

    name = "fake"
    context_window: int | None = None

    def __init__(self) -> None:
        self.n = count()

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        if request.role == "planner":
            return ModelReply(model="fake", content="1. Poll.", prompt_tokens=1)
        return calls(("poll", {"i": next(self.n)}))


def runaway_app() -> tuple[LoopdeckApp, Runtime]:
    budget = Budget(max_turns=10**9, max_tool_calls=10**9, max_tokens=10**12, max_cost_usd=10**6,
                    deadline_s=3600, max_rounds=1)  # fmt: skip
    config = RunConfig(env="test", model="fake", goal="the job finishes", budget=budget)
    runtime = Runtime(config, PollingEnv(Path("."), {}), Polling(), AutoApprover())
    prepared = PreparedRun(env_dir=None, runtime=runtime, workdir=Path("/nonexistent"))  # type: ignore[arg-type]
    return LoopdeckApp(ConsoleStart.for_run(RunSession.adopted(prepared, ApprovalQueue()))), runtime


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_a_runaway_draws_its_frames_without_layout_passes(monkeypatch) -> None:
    layouts: list[int] = []
    refresh_layout = Screen._refresh_layout

    def counted(self: Screen[Any], *args: Any, **kwargs: Any) -> None:
        layouts.append(1)
        refresh_layout(self, *args, **kwargs)

    monkeypatch.setattr(Screen, "_refresh_layout", counted)
    app, runtime = runaway_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = run_screen(app)
        assert isinstance(screen, RunScreen)
        frames = counted_frames(screen)
        table = screen.query_one(CallsTable)
        # Past the first frames: the calls table has its scrollbar, every panel its content.
        await wait_until(pilot, lambda: table.row_count > 3 * table.size.height and len(frames) > 3)
        # The fewest layout passes of three windows of 12 frames: a pass per frame would show
        # in each; a one-off one (a toast, a loaded machine's late resize) in one at most.
        passes = []
        for _ in range(3):
            layouts.clear()
            frames.clear()
            await wait_until(pilot, lambda: len(frames) >= 12)
            passes.append(len(layouts))
        grown, runtime_calls = min(passes), runtime.ledger.tool_calls
        screen.link.kill(by="operator")  # on the runs' loop, as the console sends it
        await wait_until(pilot, lambda: screen.outcome is not None)
        await pilot.pause()
        assert runtime_calls > 3 * table.size.height
        assert grown <= 1, f"layout passes in three windows of 12 frames: {passes}"
        # ... and what the layout passes did is still done: the table scrolls its whole
        # length, the cursor follows the newest row, the scrollbar knows the length.
        assert table.max_scroll_y == table.row_count + 1 - table.scrollable_content_region.height
        assert table.scroll_y == table.max_scroll_y
        assert table.cursor_row == table.row_count - 1
        assert table.vertical_scrollbar.window_virtual_size == table.row_count + 1
        log = screen.query_one("#transcript-panel", TranscriptLog)
        assert log.vertical_scrollbar.window_virtual_size == len(log.lines)


class DetailApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CallDetail()


def record(status: CallStatus, result: dict[str, Any]) -> CallRecord:
    return CallRecord(
        call_id="c7", round=1, tool="poll", args={"i": 7}, risk="read", fingerprint="f" * 8,
        state_hash="s" * 8, status=status, result=result,
    )  # fmt: skip


def body_lines(app: App[None]) -> list[str]:
    painted: str = app.query_one("#detail-body")._painted  # type: ignore[attr-defined]
    return painted.split("\n")


async def test_the_call_panel_words_a_status_as_the_calls_table_does() -> None:
    """A proposed call (a read, running: it has no event of its own until it ends) is
    "running" in the Call panel as in the table, not "proposed"."""
    from loopdeck.tui.call_status import STATUS_LOOK

    app = DetailApp()
    async with app.run_test(size=(80, 30)) as pilot:
        panel = app.query_one(CallDetail)
        for status in (CallStatus.PROPOSED, CallStatus.PENDING_APPROVAL):
            panel.show(record(status, {}))
            await pilot.pause()
            assert body_lines(app)[0].startswith(f"status {STATUS_LOOK[status][0]}  risk")


@pytest.mark.parametrize("hold", [True, False])
async def test_the_call_panel_holds_its_height_only_while_it_follows(hold: bool) -> None:
    app = DetailApp()
    done = record(CallStatus.EXECUTED, {"status": "running", "i": 7, "queue": [1, 2, 3]})
    running = record(CallStatus.RUNNING, {})
    async with app.run_test(size=(80, 30)) as pilot:
        panel = app.query_one(CallDetail)
        panel.show(done, hold_height=hold)
        await pilot.pause()
        tall = body_lines(app)
        panel.show(running, hold_height=hold)
        await pilot.pause()
        short = body_lines(app)
        assert "status running  risk read" in short[0]
        assert short[-1 if not hold else short.index(" ") - 1] == "—"
        if hold:  # blank lines make up the height, and nothing else changed
            assert len(short) == len(tall)
            assert set(short[short.index(" ") :]) == {" "}
        else:
            assert len(short) < len(tall)


async def test_the_table_and_the_log_work_out_their_style_once_per_paint(monkeypatch) -> None:
    """Within a paint the style is the one Textual works out (the same lines are drawn), and
    it is worked out once, not per line; between paints a change (focus tints the table) is
    seen at once."""
    from textual.dom import DOMNode
    from textual.geometry import Region
    from textual.widget import Widget

    from loopdeck.tui.paint_style import StylePerPaint

    # mixed in, it leaves the widgets their CSS (Textual follows the first DOMNode base)
    assert "RichLog" in TranscriptLog._css_type_names
    assert "ScrollView" in CallsTable._css_type_names
    app, _ = runaway_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = run_screen(app)
        table = screen.query_one(CallsTable)
        log = screen.query_one("#transcript-panel", TranscriptLog)
        await wait_until(pilot, lambda: table.row_count > table.size.height and len(log.lines) > 5)
        screen.link.kill(by="operator")  # on the runs' loop, as the console sends it
        await wait_until(pilot, lambda: screen.outcome is not None)
        await pilot.pause()
        walks: list[Any] = []
        walk = DOMNode.rich_style.fget
        assert walk is not None

        def counted(node: DOMNode) -> Any:
            walks.append(node)
            return walk(node)

        for widget in (table, log):
            crop = Region(0, 0, widget.size.width, widget.size.height)
            widget._styles_cache.clear()
            monkeypatch.setattr(DOMNode, "rich_style", property(counted))
            ours = widget.render_lines(crop)
            monkeypatch.undo()
            assert walks.count(widget) == 1, f"{type(widget).__name__}: {walks.count(widget)}"
            walks.clear()
            widget._styles_cache.clear()
            textuals = Widget.render_lines(widget, crop)  # asks for the style on every line
            assert [s.text for s in ours] == [s.text for s in textuals]
            assert [list(s) for s in ours] == [list(s) for s in textuals]
            assert isinstance(widget, StylePerPaint) and widget._style_this_paint is None
        screen.set_focus(None)  # the run screen focuses its Calls table as it is shown
        await pilot.pause()
        before = table.rich_style
        table.focus()
        await pilot.pause()
        assert table.has_focus and table.rich_style != before  # `:focus` tints the table


async def test_a_border_title_is_set_again_only_when_it_changes() -> None:
    """Textual repaints every line of a widget on each title assignment, same title or not:
    in a runaway the plan panel's unchanged title repainted it on every frame."""
    from loopdeck.tui.panels import title

    app = DetailApp()
    async with app.run_test() as pilot:
        panel = app.query_one(CallDetail)
        refreshes: list[int] = []
        original = panel.refresh

        def counted(*args: Any, **kwargs: Any) -> Any:
            refreshes.append(1)
            return original(*args, **kwargs)

        panel.refresh = counted  # type: ignore[method-assign]
        title(panel, "Call c1 · poll")
        title(panel, "Call c1 · poll")
        title(panel, "Steps", sub=True)
        title(panel, "Steps", sub=True)
        assert len(refreshes) == 2
        title(panel, "Call c2 · poll")
        await pilot.pause()
        assert (panel.border_title, panel.border_subtitle) == ("Call c2 · poll", "Steps")
        assert len(refreshes) == 3


def test_a_time_past_any_reach_is_said_not_raised() -> None:
    """A cap raised to 1e308 puts "cap in …" past a float's range: said, never an
    OverflowError in the fleet's refresh."""
    from loopdeck.tui.panels import elapsed_text

    assert elapsed_text(float("inf")) == "∞"
    assert elapsed_text(3725.9) == "1:02:05"
    assert elapsed_text(-5) == "0:00:00"


async def test_moving_the_focus_repaints_the_panels_it_moves_between(monkeypatch) -> None:
    """Textual repaints the whole screen on a focus change: at 160x48 a key's answer waited
    for all of it, and in a runaway (tab pressed every 100 ms) as often as the frames."""
    from textual._compositor import Compositor

    updates: list[str] = []
    full, partial = Compositor.render_full_update, Compositor.render_partial_update

    def counted_full(self: Compositor, *args: Any, **kwargs: Any) -> Any:
        updates.append("full")
        return full(self, *args, **kwargs)

    def counted_partial(self: Compositor) -> Any:
        updates.append("partial")
        return partial(self)

    app, _ = runaway_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = run_screen(app)
        assert isinstance(screen, RunScreen)
        table = screen.query_one(CallsTable)
        await wait_until(pilot, lambda: table.row_count > 3)
        screen.link.kill(by="operator")  # on the runs' loop, as the console sends it
        await wait_until(pilot, lambda: screen.outcome is not None)
        await pilot.pause()
        monkeypatch.setattr(Compositor, "render_full_update", counted_full)
        monkeypatch.setattr(Compositor, "render_partial_update", counted_partial)
        for _ in range(3):
            focused = screen.focused
            await pilot.press("tab")
            await wait_until(pilot, lambda was=focused: screen.focused is not was and bool(updates))
            await pilot.pause()
        assert "full" not in updates and "partial" in updates, updates
        # ... and the panel it moved to shows it: `:focus` tints its border.
        assert screen.focused is not None and screen.focused.has_focus
