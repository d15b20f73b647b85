"""A console that cannot go on (issue 38): every run it drives records its stop, `crashed`
with "console failed: …" and the traceback in a file it names, and it leaves non-zero. The
failure is injected where Textual cannot go on from it: a screen's timer, a worker that exits
on error. Each path twice in a row, on one store."""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SAMPLES
from console_helpers import wait_until
from test_tmux_console import Terminal
from textual.worker import WorkerFailed

from loopdeck.cli.runs import after_console
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.operator.session import RunSession
from loopdeck.store.opening import open_store
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.console_start import start_local
from loopdeck.tui.dialogs import ApprovalDialog

SIZE = (120, 36)
FILE = re.compile(r"the traceback is in (\S+console-failed-\S+\.txt)")


class Injected(RuntimeError):
    """The failure the test puts in the console."""


@pytest.fixture(autouse=True)
def _log_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the tracebacks go (the user's log folder): the test's own."""
    folder = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(folder))
    return folder


def _run_app(db: Path, run_id: str) -> LoopdeckApp:
    """`loopdeck run`'s console on a run recorded to `db`, its writes waiting in the console."""
    queue = ApprovalQueue()
    options = RunOptions(env=str(SAMPLES / "order_support"), script="solve", run_id=run_id)
    prepared = prepare_run(options, approver=queue)
    return LoopdeckApp(ConsoleStart.for_run(RunSession.adopted(prepared, queue, db)))


async def _stops(db: Path) -> dict[str, tuple[str, str]]:
    store = await open_store(db)
    try:
        rows = await store.fetchall("SELECT run_id, stop_reason, detail FROM runs")
        stopped = await store.fetchall(
            "SELECT run_id FROM events WHERE kind = 'run_stopped' AND origin IS NULL"
        )
    finally:
        await store.close()
    recorded = {row[0] for row in stopped}  # by the run itself, not marked by a reader
    return {row[0]: (row[1], row[2]) for row in rows if row[0] in recorded}


def _check_failed(app: LoopdeckApp, stops: dict[str, tuple[str, str]], run_ids: list[str]) -> str:
    """Every run stopped crashed naming the failure and an existing traceback file; the
    console leaves non-zero, its farewell naming the file."""
    assert app.return_code == 1
    assert after_console(app, None) == 1
    farewell = app.farewell
    assert "the console failed: Injected: the test's failure" in farewell, farewell
    match = FILE.search(farewell)
    assert match, farewell
    path = Path(match.group(1))
    assert path.is_file()
    text = path.read_text()
    assert "Injected: the test's failure" in text and "Traceback" in text
    for run_id in run_ids:
        reason, detail = stops[run_id]
        assert reason == "crashed", stops
        assert detail.startswith("console failed: Injected: the test's failure"), detail
        assert f"the traceback is in {path}" in detail
        assert run_id in farewell
    return str(path)


async def _until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """On the loop, not the pilot: a console that failed has no pilot to pause on."""
    waited = 0.0
    while not condition():
        assert waited < timeout, "condition not reached in time"
        await asyncio.sleep(0.05)
        waited += 0.05


# The dialog's own countdown, taken once: a second attempt's patch wraps this one, not the
# first attempt's (whose failure is on), so its dialog comes up before it fails.
_COUNTDOWN = ApprovalDialog.tick_countdown


async def _a_screen_fails(db: Path, run_id: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The approval dialog's countdown (a screen's timer) raises while the run waits on it;
    the traceback file it named."""
    broken = {"on": False}

    def tick(self: ApprovalDialog) -> None:
        if broken["on"]:
            raise Injected("the test's failure")
        _COUNTDOWN(self)

    monkeypatch.setattr(ApprovalDialog, "tick_countdown", tick)
    app = _run_app(db, run_id)
    with pytest.raises(Injected):
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
            broken["on"] = True
            await _until(lambda: app.failure is not None)
    return _check_failed(app, await _stops(db), [run_id])


async def test_a_screen_that_fails_records_the_runs_stop_twice_in_a_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    files = {await _a_screen_fails(db, f"fail{attempt:08d}", monkeypatch) for attempt in (1, 2)}
    assert len(files) == 2  # each failure its own file
    assert len(await _stops(db)) == 2


async def _a_worker_fails(db: Path) -> list[str]:
    """Two runs started from the fleet wait for approval; a worker that exits on error ends
    the console; the runs it drove."""
    app = LoopdeckApp(ConsoleStart.for_fleet(db))

    async def boom() -> None:
        raise Injected("the test's failure")

    with pytest.raises(WorkerFailed):  # Textual wraps what a worker raised
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(2):
                start_local(app, str(SAMPLES / "order_support"), "solve")
                await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
                app.pop_screen()  # the dialog, later
                app.pop_screen()  # the run: the fleet again
            run_ids = list(app.local_runs)
            assert len(run_ids) == 2
            app.screen.run_worker(boom(), exit_on_error=True)
            await _until(lambda: app.failure is not None)
    _check_failed(app, await _stops(db), run_ids)
    return run_ids


async def test_a_worker_that_fails_records_every_fleet_run_stop_twice_in_a_row(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    first, second = await _a_worker_fails(db), await _a_worker_fails(db)
    assert set(await _stops(db)) == {*first, *second}


# -- the real binary in a real terminal --------------------------------------------------------
FAULT = Path(__file__).with_name("console_fault.py")


@pytest.mark.slow  # two console processes, each loading LiteLLM: seconds (make stress)
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_failed_console_exits_non_zero_with_its_run_recorded_twice_in_a_row(
    tmp_path: Path, _log_folder: Path
) -> None:
    """`loopdeck run` in tmux at 80x24, its approval dialog's timer raising: the process
    exits 1, the farewell names the traceback file, the store holds the run's crashed stop."""
    db = tmp_path / "s.db"
    for attempt in (1, 2):
        run_id = f"tmux{attempt:08d}"
        command = [
            f"XDG_STATE_HOME={_log_folder}", sys.executable, str(FAULT), "run",
            str(SAMPLES / "order_support"), "--script", "solve", "--db", str(db),
            "--run-id", run_id,
        ]  # fmt: skip
        terminal = Terminal(command, size=(80, 24))
        try:
            screen = terminal.wait_for("EXITED", timeout=120)
        finally:
            terminal.close()
        said = screen.replace("\n", "")  # the farewell wraps at the pane's width
        assert "EXITED 1" in screen, screen
        assert "the console failed: Injected: the test's failure" in said, screen
        stops = asyncio.run(_stops(db))
        reason, detail = stops[run_id]
        assert reason == "crashed" and detail.startswith("console failed: Injected"), detail
        match = FILE.search(detail)
        assert match and Path(match.group(1)).is_file(), detail
        assert str(_log_folder) in match.group(1)
