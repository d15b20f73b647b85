"""Many runs in one console: the fleet (runs of this process and of others, live), the
approvals inbox across runs, and escape back to the fleet without stopping anything."""

from __future__ import annotations

import pytest
from conftest import SAMPLES
from console_helpers import notices, start_from_fleet, wait_until
from store_helpers import last_json, start_runner
from textual.widgets import Input

from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.fleet_table import FleetTable
from loopdeck.tui.inbox import InboxScreen

SIZE = (160, 48)


def _fleet(app: LoopdeckApp) -> FleetScreen:
    return next(screen for screen in app.screen_stack if isinstance(screen, FleetScreen))


@pytest.mark.slow
async def test_inbox_decides_writes_of_two_other_processes(tmp_path) -> None:
    db = tmp_path / "s.db"
    runners = [
        start_runner(SAMPLES / "order_support", "solve", db, "--approve", "wait") for _ in range(2)
    ]
    try:
        app = LoopdeckApp(ConsoleStart.for_fleet(db))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
            fleet = _fleet(app)
            await wait_until(pilot, lambda: fleet.fleet.waiting == 2, timeout=60)
            ordered = fleet.fleet.ordered()
            assert all(row.needs_operator == "approval" for row in ordered[:2])
            header = fleet.query_one("#fleet-header")
            await wait_until(pilot, lambda: "2 approvals waiting" in str(header.render()))
            # alerts: each run waiting for you as a toast (and the bell), while it waits
            await wait_until(
                pilot,
                lambda: all(
                    r.run_id in " ".join(t for t in notices(app) if " for your approval" in t)
                    for r in ordered[:2]
                ),
            )
            await pilot.press("i")
            await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen))
            inbox = app.screen
            await wait_until(pilot, lambda: len(inbox.entries) == 2)
            first = inbox.selected()
            assert first.rationale and first.plan_step.startswith("3.")
            await pilot.press("a")
            # the inbox stays open with the next entry selected
            await wait_until(pilot, lambda: len(inbox.entries) == 1 and inbox.selected())
            second = inbox.selected()
            assert second.run_id != first.run_id and app.screen is inbox
            await pilot.press("r")
            await wait_until(pilot, lambda: isinstance(inbox.focused, Input))
            await pilot.press(*"wrong address", "enter")
            await wait_until(pilot, lambda: not inbox.entries)
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is fleet)

            # decided, their waits' toasts come down; each stop is a toast
            await wait_until(
                pilot, lambda: not [t for t in notices(app) if " for your approval" in t]
            )
            await wait_until(
                pilot,
                lambda: all(
                    any(" stopped: " in t and r in t for t in notices(app))
                    for r in (first.run_id, second.run_id)
                ),
            )
        outcomes = {}
        for runner in runners:
            out, _ = runner.communicate(timeout=60)
            summary = last_json(out)
            outcomes[summary["run_id"]] = summary
        assert outcomes[first.run_id]["stop_reason"] == "goal_met"
        rejected = outcomes[second.run_id]
        assert rejected["stop_reason"] != "goal_met"
        assert "rejected" in [c["status"] for c in rejected["calls"]]
    finally:
        for runner in runners:
            runner.kill()
            runner.wait()


async def test_a_run_of_this_console_keeps_running_behind_the_fleet(tmp_path) -> None:
    db = tmp_path / "s.db"
    app = LoopdeckApp(ConsoleStart.for_fleet(db))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        fleet = app.screen
        screen = await start_from_fleet(pilot, app, "order_support", "solve")
        [run_id] = app.local_runs
        await wait_until(pilot, lambda: bool(screen.link.pending()), timeout=60)
        # leave the run waiting: escape goes back to the fleet, nothing stops
        while app.screen is not fleet:
            await pilot.press("escape")
            await pilot.pause()
        await wait_until(pilot, lambda: run_id in fleet.fleet.rows)
        await wait_until(pilot, lambda: fleet.fleet.rows[run_id].needs_operator == "approval")
        assert screen.running
        # decided from the inbox, through the store: the run of this process goes on
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen))
        inbox = app.screen
        await wait_until(pilot, lambda: len(inbox.entries) == 1)
        await pilot.press("a")
        await wait_until(pilot, lambda: not screen.running, timeout=60)
        assert screen.view.stop_reason == "goal_met"
        await pilot.press("escape")
        await wait_until(pilot, lambda: fleet.fleet.rows[run_id].stop_reason == "goal_met")
        table = fleet.query_one("#fleet-table")
        table.move_cursor(row=table.get_row_index(run_id))
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen)


def test_alerts_are_said_once_each() -> None:
    from datetime import UTC, datetime, timedelta

    from loopdeck.operator.fleet import Fleet, FleetRow
    from loopdeck.operator.fleet_alerts import Alerts

    now = datetime(2026, 1, 1, tzinfo=UTC)
    row = FleetRow("r1", "env", "s", "m", "deciding", None, now)
    fleet, alerts = Fleet(rows={"r1": row}), Alerts()
    assert alerts.check(fleet, now) == []  # first sight of a run with nothing to say
    row.pending, row.soonest_expiry = 1, now + timedelta(seconds=20)
    texts = [a.text for a in alerts.check(fleet, now)]
    assert texts == ["run r1 waits for your approval", "run r1: a receipt expires in under 30 s"]
    assert alerts.check(fleet, now) == []  # each said once
    row.repeats, row.closest, row.closest_fraction = 1, "tokens 85%", 0.85
    texts = [a.text for a in alerts.check(fleet, now)]
    assert texts == ["run r1: the guard blocked a repeat", "run r1: tokens 85% of its cap"]
    row.pending, row.state, row.stop_reason = 0, "stopped", "no_progress"
    [stopped] = alerts.check(fleet, now)
    assert stopped.text == "run r1 stopped: no_progress" and stopped.severity == "error"


def test_a_run_waiting_for_an_answer_is_live_and_not_announced_as_stopped() -> None:
    from datetime import UTC, datetime

    from loopdeck.core.states import TERMINAL_STATES, RunState
    from loopdeck.operator.fleet import Fleet, FleetRow
    from loopdeck.operator.fleet_alerts import Alerts
    from loopdeck.store import queries

    assert set(queries.LIVE_STATES) == {s.value for s in RunState if s not in TERMINAL_STATES}
    fleet, alerts, now = Fleet(), Alerts(), datetime.now(UTC)
    row = FleetRow(run_id="r1", env="e", script="s", model="m", state="deciding",
                   stop_reason=None, started_at=now)  # fmt: skip
    fleet.rows["r1"] = row
    alerts.check(fleet, now)
    row.state = "awaiting_answer"
    assert row.live and alerts.check(fleet, now) == []
    row.state, row.stop_reason = "stopped", "cancelled"
    assert [a.text for a in alerts.check(fleet, now)] == ["run r1 stopped: cancelled"]


async def test_a_runner_that_dies_silently_is_shown_crashed_without_any_change(tmp_path) -> None:
    """Its runner gone, a run commits nothing more: the fleet still looks (once a second)
    and shows it crashed, not waiting for ever."""
    import asyncio
    import subprocess
    import time

    from loopdeck.operator.fleet import Fleet
    from loopdeck.store.liveness import process_started, this_host
    from loopdeck.store.opening import open_store

    store = await open_store(tmp_path / "s.db")
    runner = subprocess.Popen(["sleep", "600"])
    try:
        await store.execute(
            "INSERT INTO runs (run_id, env, script, model, state, started_at, pid, host,"
            " heartbeat_at, pid_started) VALUES ('r1', 'e', 's', 'm', 'awaiting_approval',"
            " '2026-01-01T00:00:00+00:00', ?, ?, ?, ?)",
            (runner.pid, this_host(), time.time(), process_started(runner.pid)),
        )
        fleet = Fleet()
        await fleet.refresh(store)
        assert fleet.rows["r1"].live
        runner.kill()
        runner.wait()
        end = time.monotonic() + 30
        while fleet.rows["r1"].live:
            assert time.monotonic() < end, "the dead runner's run still shown live"
            await fleet.refresh(store)
            await asyncio.sleep(0.1)
        assert fleet.rows["r1"].stop_reason == "crashed"
    finally:
        runner.kill()
        await store.close()


async def test_quitting_the_fleet_names_only_the_runs_it_killed(tmp_path) -> None:
    """One run already ended goal_met, one live: `q`, `y` kills the live one, and the
    farewell names it alone."""
    from loopdeck.tui.dialogs import ApprovalDialog, ConfirmDialog

    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        fleet = app.screen
        ended = await start_from_fleet(pilot, app, "order_support", "solve")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog), timeout=60)
        await pilot.press("a")
        await wait_until(pilot, lambda: not ended.running, timeout=60)
        assert ended.view.stop_reason == "goal_met"
        while app.screen is not fleet:
            await pilot.press("escape")
            await pilot.pause()
        await start_from_fleet(pilot, app, "order_support", "solve")
        await wait_until(pilot, lambda: len(app.local_runs) == 2)
        live = list(app.local_runs.values())[-1]
        await wait_until(pilot, lambda: bool(live.link.pending()), timeout=60)
        while app.screen is not fleet:
            await pilot.press("escape")
            await pilot.pause()
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_until(pilot, lambda: not live.running, timeout=60)
    assert live.view.stop_reason == "killed"
    db = tmp_path / "s.db"
    assert app.farewell == (
        f"1 run killed: {live.view.run_id} · replay: loopdeck replay {live.view.run_id} --db {db}"
    )  # a line that can be run as printed
    assert ended.view.run_id not in app.farewell


async def _three_runs(db, live_too: bool = False) -> None:
    """zeta ended no_progress, alpha met its goal (the newest), mid waits for an approval
    with this process as its runner; `live_too`: live, env beta, older than all, runs on."""
    import os

    from loopdeck.store.liveness import this_host
    from loopdeck.store.opening import open_store

    store = await open_store(db)
    try:
        for run_id, env, state, stop, day in (
            ("zeta00000000", "zeta", "stopped", "no_progress", 2),
            ("alpha0000000", "alpha", "complete", "goal_met", 3),
            ("mid000000000", "mid", "awaiting_approval", None, 1),
            *([("live00000000", "beta", "deciding", None, 0)] if live_too else []),
        ):
            await store.execute(
                "INSERT INTO runs (run_id, env, script, model, mode, goal, state, stop_reason,"
                " started_at, pid, host, heartbeat_at, approve_mode) VALUES (?, ?, 'solve',"
                " 'scripted', 'rounds', 'g', ?, ?, ?, ?, ?, 0, 'wait')",
                (run_id, env, state, stop, f"2026-01-1{day}T00:00:00+00:00", os.getpid(),
                 this_host()),
            )  # fmt: skip
        await store.execute(
            "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at, state)"
            " VALUES ('mid000000000', 'c1', 'refund', '{}', '2026-01-01T00:00:01+00:00',"
            " '2999-01-01T00:00:00+00:00', 'pending')"
        )
    finally:
        await store.close()


def _listed(fleet: FleetScreen) -> list[str]:
    return fleet.query_one("#fleet-table", FleetTable).run_ids


async def _fleet_of_three(pilot, app: LoopdeckApp, runs: int = 3) -> FleetScreen:
    await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
    fleet = app.screen
    await wait_until(pilot, lambda: len(_listed(fleet)) == runs)
    return fleet


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_the_filter_applies_as_typed_and_matches_every_column_shown(tmp_path) -> None:
    await _three_runs(tmp_path / "s.db")
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=SIZE) as pilot:
        fleet = await _fleet_of_three(pilot, app)
        await pilot.press("slash", *"no_prog")  # the stop column; no enter
        await wait_until(pilot, lambda: _listed(fleet) == ["zeta00000000"])
        for _ in "no_prog":
            await pilot.press("backspace")
        await pilot.press(*"1 approval")  # the waiting column
        await wait_until(pilot, lambda: _listed(fleet) == ["mid000000000"])
        await pilot.press("escape")
        await wait_until(pilot, lambda: len(_listed(fleet)) == 3)


async def test_s_cycles_the_fleets_sort_and_the_keys_line_says_which(tmp_path) -> None:
    from loopdeck.tui.keys_bar import KeysBar

    await _three_runs(tmp_path / "s.db", live_too=True)
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=SIZE) as pilot:
        fleet = await _fleet_of_three(pilot, app, 4)
        keys = fleet.query_one(KeysBar)
        # mid waits for you: first in every order
        needs_you = ["mid000000000", "live00000000", "alpha0000000", "zeta00000000"]
        expected = [
            ("needs you first", needs_you),
            ("newest first", ["mid000000000", "alpha0000000", "zeta00000000", "live00000000"]),
            ("by env", ["mid000000000", "alpha0000000", "live00000000", "zeta00000000"]),
            ("needs you first", needs_you),
        ]
        for index, (words, order) in enumerate(expected):
            if index:
                await pilot.press("s")
            await wait_until(pilot, lambda order=order: _listed(fleet) == order)
            await wait_until(pilot, lambda words=words: f"Sort: {words}" in str(keys.render()))
        assert fleet.sort == "needs you" and app.screen is fleet


async def test_state_and_stop_are_on_screen_at_80_columns(tmp_path) -> None:
    await _three_runs(tmp_path / "s.db")
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=(80, 24)) as pilot:
        fleet = await _fleet_of_three(pilot, app)
        table = fleet.query_one("#fleet-table", FleetTable)
        ends = table.column_ends()
        assert ends["stop"] <= table.scrollable_content_region.width, ends
        assert ends["state"] <= table.scrollable_content_region.width, ends
        assert table.scroll_x == 0


async def test_n_starts_a_run_of_an_env_folder_named_in_the_path_box(tmp_path) -> None:
    import shutil

    from textual.widgets import OptionList

    from loopdeck.tui.launcher import LauncherScreen, ScriptOption

    desk = tmp_path / "mydesk"
    shutil.copytree(SAMPLES / "order_support", desk, ignore=shutil.ignore_patterns("__py*"))
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen))
        launcher = app.screen
        await pilot.press("slash")
        box = launcher.query_one("#launcher-path", Input)
        await wait_until(pilot, lambda: launcher.focused is box)
        box.value = str(desk)
        await pilot.press("enter")
        listed = launcher.query_one(OptionList)

        def chosen() -> str | None:
            if listed.highlighted is None or launcher.focused is not listed:
                return None
            option = listed.get_option_at_index(listed.highlighted)
            return option.choice.path if isinstance(option, ScriptOption) else None

        await wait_until(pilot, lambda: chosen() == str(desk))
        await pilot.press("enter")
        await wait_until(pilot, lambda: bool(app.local_runs))
        assert app.prepared_runs[-1].env_dir.path == desk


async def test_a_folder_that_is_no_env_is_said_in_the_launcher(tmp_path) -> None:
    from loopdeck.tui.launcher import LauncherScreen

    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen))
        await pilot.press("slash")
        box = app.screen.query_one("#launcher-path", Input)
        await wait_until(pilot, lambda: app.screen.focused is box)
        box.value = str(tmp_path / "nowhere")
        await pilot.press("enter")

        await wait_until(pilot, lambda: any("no such env folder" in m for m in notices(app)))
        assert not app.local_runs


async def test_an_empty_fleet_says_where_to_start(tmp_path) -> None:
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        header = app.screen.query_one("#fleet-header")

        def said() -> str:
            return str(header.render())

        await wait_until(pilot, lambda: "0 runs" in said())
        assert "n starts a run" in said()
