"""`f` on a call of the run screen (issue 42): the fork dialog, the fork queued in the run's
store (said in a toast with its id), the refusals said (a run not recorded, a run whose log
holds no model reply), and a run's moves in its transcript and header."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from conftest import SAMPLES
from console_helpers import console_app, notices, run_screen, wait_until

from loopdeck.core.approvals import AutoApprover
from loopdeck.core.events import Event, EventBus, ModelReplied, RunStarted
from loopdeck.core.replay_events import RunForked, RunMoved
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.links import ReplayLink
from loopdeck.operator.runview import RunView
from loopdeck.operator.transcript import Transcript
from loopdeck.store import leases
from loopdeck.store.opening import open_store
from loopdeck.store.writer import EventWriter
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.fork_dialog import ForkDialog, env_scripts
from loopdeck.tui.replay import ReplayScreen

SIZE = (100, 30)


def replay_of(db: Path, run_id: str) -> LoopdeckApp:
    return LoopdeckApp(ConsoleStart.for_link(ReplayLink(db, run_id)))


def replayed(app: LoopdeckApp) -> Callable[[], bool]:
    def ready() -> bool:
        screen = run_screen(app)
        return isinstance(screen, ReplayScreen) and screen.position > 0

    return ready


async def test_f_forks_a_finished_run_at_the_selected_call(solved_run: tuple[Path, str]) -> None:
    db, run_id = solved_run
    app = replay_of(db, run_id)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, replayed(app))
        screen = run_screen(app)
        assert screen is not None
        table = screen.query_one(CallsTable)
        table.move_cursor(row=list(screen.view.calls).index("c2"))
        await pilot.pause()
        assert table.cursor_key == "c2"
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, ForkDialog))
        dialog = app.screen
        assert isinstance(dialog, ForkDialog)
        said = str(dialog.query_one("#fork-point").render())
        assert "Fork at c2" in said and "check_address_change" in said
        await wait_until(pilot, lambda: bool(dialog.scripts))  # the env's, offered
        assert "solve" in dialog.scripts and "typo" in dialog.scripts
        await pilot.press("tab", "tab")  # model, script, then the message
        await pilot.press(*"hello", "enter")
        await wait_until(pilot, lambda: any("forked as" in t for t in notices(app)))
        [toast] = [t for t in notices(app) if "forked as" in t]
        fork_id = toast.split()[2]
        assert f"forked as {fork_id} at c2: queued for a worker" in toast
        assert "loopdeck worker" in toast
        # No worker runs for the store: said beside it, as `loopdeck fork` says it.
        await wait_until(pilot, lambda: any(f"{fork_id} is queued;" in t for t in notices(app)))
        [none_runs] = [t for t in notices(app) if f"{fork_id} is queued;" in t]
        assert "no worker runs for" in none_runs and "nothing happens until one starts" in none_runs
    store = await open_store(db, create=False)
    try:
        placed = await leases.placement(store, fork_id)
    finally:
        await store.close()
    assert placed is not None and placed["state"] == leases.QUEUED
    import json

    forked = json.loads(placed["options"])["fork"]
    assert (forked["source"], forked["at"], forked["message"]) == (run_id, "c2", "hello")


async def test_a_fork_asked_with_a_script_the_env_has_not_is_refused_in_the_dialog(
    solved_run: tuple[Path, str],
) -> None:
    app = replay_of(*solved_run)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, replayed(app))
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, ForkDialog))
        dialog = app.screen
        assert isinstance(dialog, ForkDialog)
        await wait_until(pilot, lambda: bool(dialog.scripts))
        await pilot.press("tab", *"nope", "enter")
        problem = dialog.query_one("#fork-problem")
        assert problem.display and "No script nope" in str(problem.render())
        assert app.screen is dialog  # nothing forked: the operator types again, or esc
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ReplayScreen))
        assert not any("forked" in t for t in notices(app))


async def recorded_without_replies(db: Path) -> str:
    """A run recorded by a worker before loopdeck kept its model's replies: its events, none
    of them a `ModelReplied`, one a move to host-b after its first three."""
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    options = RunOptions(env=str(SAMPLES / "order_support"), script="solve")
    prepared = prepare_run(options, approver=AutoApprover(), bus=bus)
    try:
        await prepared.runtime.run()
    finally:
        prepared.cleanup()
    assert not any(isinstance(e, ModelReplied) for e in events)
    started = events[0]
    assert isinstance(started, RunStarted)
    move = moved().model_copy(update={"run_id": started.run_id, "seq": 4, "after_seq": 3})
    later = [e.model_copy(update={"seq": e.seq + 1}) for e in events[3:]]
    store = await open_store(db)
    try:
        await EventWriter(store, approve_mode="auto").write_back([*events[:3], move, *later])
    finally:
        await store.close()
    return started.run_id


async def test_a_run_that_moved_says_where_it_is_in_its_header_and_transcript(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    run_id = await recorded_without_replies(db)
    app = replay_of(db, run_id)
    async with app.run_test(size=(140, 30)) as pilot:
        await wait_until(pilot, replayed(app))
        screen = run_screen(app)
        assert screen is not None
        header = str(screen.query_one("#run-header").render())
        assert f"run {run_id} on host-b" in header
        assert "resumed after host-a's lease expired 3s ago" in header
        titles = [entry.title for entry in screen.transcript.entries]
        assert "moved · resumed on host-b after host-a's lease expired 3s ago" in titles


async def test_f_on_a_run_whose_log_has_no_model_reply_says_why_not(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    run_id = await recorded_without_replies(db)
    app = replay_of(db, run_id)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, replayed(app))
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, ForkDialog))
        await pilot.press("enter")
        await wait_until(pilot, lambda: any("cannot be forked" in t for t in notices(app)))
        [said] = [t for t in notices(app) if "cannot be forked" in t]
        assert "no model reply" in said and run_id in said
        assert isinstance(app.screen, ReplayScreen)  # the console goes on
    store = await open_store(db, create=False)
    try:
        rows = await store.fetchall("SELECT run_id FROM leases")
    finally:
        await store.close()
    assert rows == []


async def test_f_on_a_run_not_recorded_says_there_is_nothing_to_fork_from() -> None:
    app = console_app(SAMPLES / "order_support", "solve", approver=AutoApprover())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: (s := run_screen(app)) is not None and s.view.finished)
        await pilot.press("f")
        await wait_until(pilot, lambda: any("not recorded" in t for t in notices(app)))
        assert not isinstance(app.screen, ForkDialog)


def test_the_scripts_offered_are_the_envs_or_why_not() -> None:
    scripts, why = env_scripts("order_support")
    assert "solve" in scripts and why == ""
    scripts, why = env_scripts("/no/such/env")
    assert scripts == [] and "cannot be read" in why and "/no/such/env" in why


def moved(
    note: str = "resumed on host-b after host-a's lease expired 3s ago", host: str = "host-b"
) -> RunMoved:
    at = datetime(2026, 12, 5, tzinfo=UTC)
    return RunMoved(run_id="r1", seq=9, at=at, host=host, was="host-a", epoch=2, note=note,
                    after_seq=8)  # fmt: skip


def forked() -> RunForked:
    at = datetime(2026, 12, 5, tzinfo=UTC)
    return RunForked(run_id="r2", seq=30, at=at, source="r1", at_call="c3", through_seq=27,
                     changed=["model m2", "script other", "a message to the agent"])  # fmt: skip


def test_a_move_and_a_fork_are_lines_of_the_transcript() -> None:
    transcript = Transcript()
    move = transcript.apply(moved())
    fork = transcript.apply(forked())
    assert move is not None and fork is not None
    assert move.title == "moved · resumed on host-b after host-a's lease expired 3s ago"
    assert "through event 8" in move.body and "epoch 2" in move.body and "host-a" in move.body
    assert fork.title == ("forked from r1 at c3; model m2 / script other / a message to the agent")
    assert "through 27" in fork.body and "grants given before the fork are revoked" in fork.body


def test_the_view_keeps_where_the_run_is_from_its_moves() -> None:
    view = RunView()
    assert (view.host, view.moved, view.forked) == ("", "", "")
    view.apply(moved())
    assert view.host == "host-b"
    assert view.moved == "resumed after host-a's lease expired 3s ago"
    view.apply(moved("resumed on host-c once its operator decided (parked by host-b)", "host-c"))
    assert view.host == "host-c"
    assert view.moved == "resumed once its operator decided (parked by host-b)"
    view.apply(forked())
    assert view.forked == "fork of r1 at c3"
