"""What needs you is always in view: runs waiting for an approval or an answer are pinned under
the fleet's header however far down the cursor is, the `waiting` column comes second at every
size, and a question is called a question (the cell, the header, the alert). In the pilot and
in a real terminal (tmux, the `loopdeck` binary)."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from console_helpers import screen_text, wait_until
from test_tmux_console import LOOPDECK, Terminal
from textual.app import App

from loopdeck.operator.fleet import Fleet, FleetRow
from loopdeck.operator.fleet_alerts import Alerts
from loopdeck.store.liveness import this_host
from loopdeck.store.opening import open_store
from loopdeck.store.queries import QUESTION_NEVER_EXPIRES
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.fleet_table import FleetTable
from loopdeck.tui.shared_state import SharedState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SIZES = [(80, 24), (100, 30), (160, 48)]
size_ids = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
# Three runs that need you: two writes waiting for approval and one question.
WAITING = {"appr00000001": "approval", "appr00000002": "approval", "asks00000003": "question"}


# -- the store, written as runners would have left it -----------------------------------------
async def _ended_runs(db: Path, count: int) -> None:
    store = await open_store(db)
    try:
        async with store.transaction() as tx:
            for i in range(count):
                await tx.execute(
                    "INSERT INTO runs (run_id, env, script, model, mode, goal, state, stop_reason,"
                    " started_at) VALUES (?, 'order_support', 'solve', 'scripted', 'rounds', 'g',"
                    " 'complete', 'goal_met', ?)",
                    (f"done{i:08d}", (NOW - timedelta(minutes=i)).isoformat()),
                )
    finally:
        await store.close()


async def _waiting_runs(db: Path, pid: int, waiting: dict[str, list[str]]) -> None:
    """Live runs of `pid` on this host, each with its pending `approval`s and `question`s."""
    store = await open_store(db)
    try:
        for run_id, asks in waiting.items():
            state = "awaiting_approval" if "approval" in asks else "awaiting_answer"
            await store.execute(
                "INSERT INTO runs (run_id, env, script, model, mode, goal, state, started_at, pid,"
                " host, heartbeat_at, approve_mode) VALUES (?, 'order_support', 'solve',"
                " 'scripted', 'rounds', 'g', ?, ?, ?, ?, ?, 'wait')",
                (run_id, state, NOW.isoformat(), pid, this_host(), time.time()),
            )
            for n, ask in enumerate(asks):
                question = ask == "question"
                await store.execute(
                    "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at,"
                    " state) VALUES (?, ?, ?, ?, ?, ?, 'pending')",
                    (run_id, f"c{n}", "ask_user" if question else "refund",
                     '{"question": "which order?"}' if question else "{}", NOW.isoformat(),
                     QUESTION_NEVER_EXPIRES if question else "2999-01-01T00:00:00+00:00"),
                )  # fmt: skip
    finally:
        await store.close()


def _three_waiting() -> dict[str, list[str]]:
    return {run_id: [ask] for run_id, ask in WAITING.items()}


# -- the fleet's data --------------------------------------------------------------------------
async def test_the_fleet_tells_questions_from_approvals(tmp_path: Path) -> None:
    from loopdeck.operator.fleet import waiting_text

    db = tmp_path / "s.db"
    await _waiting_runs(db, os.getpid(), {
        "w": ["approval"], "q": ["question"], "ww": ["approval", "approval"],
        "wq": ["approval", "question"], "qq": ["question", "question"],
    })  # fmt: skip
    store = await open_store(db)
    try:
        fleet = Fleet()
        await fleet.refresh(store)
    finally:
        await store.close()
    said = {run_id: (row.approvals, row.questions) for run_id, row in fleet.rows.items()}
    assert said == {"w": (1, 0), "q": (0, 1), "ww": (2, 0), "wq": (1, 1), "qq": (0, 2)}
    assert [fleet.rows[r].needs_operator for r in ("w", "q", "wq")] == [
        "approval", "question", "approval"
    ]  # fmt: skip
    assert (fleet.waiting, fleet.questions) == (8, 4)
    assert waiting_text(2, 1) == "2 approvals, 1 question"
    assert waiting_text(0, 1) == "1 question" and waiting_text(1, 0) == "1 approval"


def test_a_question_is_announced_as_a_question() -> None:
    row = FleetRow("r1", "env", "s", "m", "deciding", None, NOW)
    fleet, alerts = Fleet(rows={"r1": row}), Alerts()
    assert alerts.check(fleet, NOW) == []
    row.state, row.pending, row.questions = "awaiting_answer", 1, 1
    assert [a.text for a in alerts.check(fleet, NOW)] == ["run r1 asks you a question"]
    row.pending = 2  # and then a write too
    assert [a.text for a in alerts.check(fleet, NOW)] == ["run r1 waits for your approval"]


async def test_the_inbox_calls_a_question_a_question(tmp_path: Path) -> None:
    from loopdeck.operator.inbox import PendingQuestion, PendingWrite
    from loopdeck.tui.inbox import InboxScreen

    app: App[None] = App()
    async with app.run_test(size=(100, 30)) as pilot:
        inbox = InboxScreen(tmp_path / "s.db", lambda: NOW)
        await app.push_screen(inbox)
        await wait_until(pilot, lambda: inbox.inbox.counter != -1)
        question = PendingQuestion(run_id="r2", call_id="q1", question="which?", env="e/s")
        write = PendingWrite(
            run_id="r1", call_id="c1", tool="refund", args={}, env="e/s",
            expires=NOW + timedelta(seconds=30), rationale="", plan_step="",
        )  # fmt: skip
        inbox.inbox.entries = [write, question]
        inbox.render_inbox()
        detail, table = inbox.query_one("#inbox-detail"), inbox.query_one("#inbox-table")
        assert "Approvals" not in str(table.border_title)  # it lists questions too
        assert str(detail.border_title) == "Selected write"
        await pilot.press("down")
        await wait_until(pilot, lambda: str(detail.border_title) == "Selected question")


# -- the table, in the pilot -------------------------------------------------------------------
def _row(i: int, **fields: Any) -> FleetRow:
    values: dict[str, Any] = dict(
        run_id=f"run{i:04d}", env="env", script="solve", model="scripted", state="stopped",
        stop_reason="goal_met", started_at=NOW - timedelta(seconds=i),
    )  # fmt: skip
    return FleetRow(**(values | fields))


class FleetApp(App[None]):
    def __init__(self, db: Path) -> None:
        super().__init__()
        self.db = db
        self.seen_runs: set[str] = set()

    def on_mount(self) -> None:
        self.push_screen(FleetScreen(self.db, lambda: NOW, SharedState(seen_runs=self.seen_runs)))


async def _fleet_of(pilot: Any, app: FleetApp, rows: list[FleetRow]) -> FleetScreen:
    await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
    fleet = app.screen
    assert isinstance(fleet, FleetScreen)
    await wait_until(pilot, lambda: fleet.fleet.counter != -1)  # the empty store read once
    fleet.fleet.rows = {row.run_id: row for row in rows}
    fleet.render_fleet()
    await pilot.pause()
    return fleet


@size_ids
async def test_runs_that_need_you_arrive_in_view_with_the_cursor_far_down(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    app = FleetApp(tmp_path / "s.db")
    async with app.run_test(size=size) as pilot:
        fleet = await _fleet_of(pilot, app, [_row(i) for i in range(80)])
        table = fleet.query_one(FleetTable)
        await pilot.press("end")
        assert table.cursor_run == "run0079" and table.scroll_y > 0
        arrivals = [
            _row(100 + k, state="awaiting_approval", stop_reason=None, pending=1) for k in range(3)
        ]
        for row in arrivals:
            fleet.fleet.rows[row.run_id] = row
        fleet.render_fleet()
        await pilot.pause()
        # the cursor keeps its run, in view; the new ones are on screen above it
        assert table.cursor_run == "run0079"
        await wait_until(pilot, lambda: all(r.run_id in screen_text(app) for r in arrivals))
        await wait_until(pilot, lambda: "run0079" in screen_text(app))  # after a relayout
        # scrolling the others never takes them off screen
        for key in ("pageup", "pagedown", "up", "up"):
            await pilot.press(key)
            shown = screen_text(app)
            assert all(r.run_id in shown for r in arrivals), (key, shown)
            assert table.cursor_run in shown, key
        # a click on a pinned run selects it; home goes to the top of the list too
        await pilot.click(table, offset=(5, table.content_offset.y + 1 + 1))
        assert table.cursor_run == arrivals[1].run_id
        await pilot.press("down", "down", "down")
        assert table.cursor_row == 4 and "run0001" in screen_text(app)
        await pilot.press("end", "home")
        assert table.cursor_row == 0 and table.scroll_y == 0


async def test_the_pinned_runs_take_at_most_half_the_rows(tmp_path: Path) -> None:
    """Forty runs waiting at 80x24: the first half of the rows shown are theirs, the rest of
    the table still scrolls beneath them."""
    rows = [_row(i, state="awaiting_approval", stop_reason=None, pending=1) for i in range(40)]
    rows += [_row(100 + i) for i in range(40)]
    app = FleetApp(tmp_path / "s.db")
    async with app.run_test(size=(80, 24)) as pilot:
        fleet = await _fleet_of(pilot, app, rows)
        table = fleet.query_one(FleetTable)
        await pilot.press("end")
        shown = screen_text(app)
        assert "run0139" in shown and "run0000" in shown, shown
        assert 0 < table.pinned <= table.rows_shown // 2


@size_ids
async def test_the_waiting_column_is_second_and_a_question_is_a_question(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    db = tmp_path / "s.db"
    await _ended_runs(db, 5)
    await _waiting_runs(db, os.getpid(), _three_waiting())
    app = LoopdeckApp(ConsoleStart.for_fleet(db))
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        fleet = app.screen
        assert isinstance(fleet, FleetScreen)
        table = fleet.query_one(FleetTable)
        await wait_until(pilot, lambda: table.row_count == 8)
        header = fleet.query_one("#fleet-header")
        await wait_until(pilot, lambda: "⚠ 2 approvals, 1 question waiting" in str(header.render()))
        shown = screen_text(app)
        titles = next(line for line in shown.splitlines() if " run " in line and "state" in line)
        assert titles.split()[1:3] == ["run", "waiting"], titles
        ends = table.column_ends()
        assert ends["waiting"] <= table.scrollable_content_region.width and table.scroll_x == 0
        for run_id, ask in WAITING.items():
            line = next(line for line in shown.splitlines() if run_id in line)
            assert f"1 {ask}" in line, line


# -- the real binary in a real terminal --------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@size_ids
def test_three_waiting_runs_on_screen_in_a_real_terminal(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """Sixty ended runs, the cursor on the last; then three runs start waiting (two writes,
    one question): all three rows and their `waiting` cells are on screen at once."""
    db = tmp_path / "s.db"
    asyncio.run(_ended_runs(db, 60))
    terminal = Terminal([str(LOOPDECK), "console", "--db", str(db)], size=size)
    try:
        terminal.wait_for("60 runs")
        terminal.wait_for("done00000000")  # the table is drawn
        terminal.press("End")
        terminal.wait_for("done00000059")
        asyncio.run(_waiting_runs(db, os.getpid(), _three_waiting()))
        screen = terminal.wait_for("⚠ 2 approvals, 1 question waiting")
        end = time.monotonic() + 30
        while not all(run_id in screen for run_id in WAITING):
            assert time.monotonic() < end, screen
            screen = terminal.screen()
        lines = screen.splitlines()
        for run_id, ask in WAITING.items():
            line = next(line for line in lines if run_id in line)
            assert f"1 {ask}" in line, screen
        titles = next(line for line in lines if " run " in line and "state" in line)
        assert titles.split()[1:3] == ["run", "waiting"], screen
        assert "done00000059" in screen  # the cursor's run is still in view
    finally:
        terminal.close()
