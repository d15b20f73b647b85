"""A service manager's SIGTERM and a user's Ctrl-C (SIGINT) end the real `loopdeck` binary's run
as a kill: recorded `killed` by the signal, every event committed, the summary said, no child
process left behind, and the process ends by that signal."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import prepare
from test_tmux_console import Terminal

from loopdeck.core.states import StopReason
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.session import RunSession
from loopdeck.stop_signals import descendants
from loopdeck.store.opening import open_store
from loopdeck.store.runner import RecordedRun
from loopdeck.store.writer import EventWriter

LOOPDECK = Path(sys.executable).with_name("loopdeck")
SIGNALS_ENV = Path(__file__).parent / "envs" / "signals"
STARTUP_S = 120  # the first events wait for LiteLLM's import, slow on a loaded machine


def wait_until(what: str, condition: Any, timeout: float = STARTUP_S) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if found := condition():
            return found
        time.sleep(0.05)
    raise AssertionError(f"never: {what}")


def stored(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read the store as another process would (read-only; nothing there yet reads empty)."""
    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:  # the schema is being created
        return []


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


class Runner:
    """The binary headless in a session of its own: its process group is what it started."""

    def __init__(self, tmp_path: Path, script: str) -> None:
        self.db = tmp_path / "s.db"
        self.out, self.err = tmp_path / "out.txt", tmp_path / "err.txt"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(
                [str(LOOPDECK), "run", str(SIGNALS_ENV), "--script", script, "--headless",
                 "--db", str(self.db)],
                stdout=out, stderr=err, start_new_session=True,
            )  # fmt: skip

    def events(self) -> int:
        rows = stored(self.db, "SELECT count(*) FROM events")  # empty while the schema is made
        return int(rows[0][0]) if rows else 0

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        code = self.proc.wait(timeout=timeout)
        return code, self.out.read_text(), self.err.read_text()

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def assert_recorded_killed_by(db: Path, sig: signal.Signals) -> None:
    by = f"signal {sig.name}"
    ((run_id, state, reason, detail),) = stored(
        db, "SELECT run_id, state, stop_reason, detail FROM runs"
    )
    assert (state, reason) == ("stopped", "killed") and detail.startswith(f"killed by {by}")
    rows = stored(db, "SELECT seq, kind, body FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
    assert [seq for seq, _, _ in rows] == list(range(1, len(rows) + 1))  # none lost
    assert rows[0][1] == "run_started" and rows[-1][1] == "run_stopped"
    assert json.loads(rows[-1][2])["detail"].startswith(f"killed by {by}")
    commands = [json.loads(body) for _, kind, body in rows if kind == "operator_command"]
    assert [(c["command"], c["by"]) for c in commands] == [("kill", by)]


@pytest.mark.parametrize(
    "sig",
    [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
    ids=["SIGTERM", "SIGINT"],
)
@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
def test_a_stop_signal_kills_a_runaway_headless_run_and_records_it(tmp_path, sig) -> None:
    runner = Runner(tmp_path, "runaway")
    try:
        wait_until("the runaway run records events", lambda: runner.events() > 50)
        runner.proc.send_signal(sig)
        code, out, err = runner.finish()
    finally:
        runner.close()
    assert code == -sig  # ended by the signal itself, once all was recorded and said
    assert "stopped: killed" in out and f"killed by signal {sig.name}" in out
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert_recorded_killed_by(runner.db, sig)
    assert group_gone(runner.proc.pid)


async def test_a_kill_while_the_model_loads_still_records_the_start() -> None:
    prepared, recorder = prepare(SIGNALS_ENV, "runaway")
    try:
        prepared.runtime.kill(by="console")
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    kinds = [event.kind for event in recorder.events]
    assert outcome.stop_reason is StopReason.KILLED
    assert kinds.count("run_started") == 1 and kinds[-1] == "run_stopped"


async def test_a_signal_before_the_run_started_kills_it_as_it_starts(tmp_path) -> None:
    """The signal came while the run was prepared (its model loading): the store holds its
    start, the kill and its stop, numbered from 1."""
    store = await open_store(tmp_path / "s.db")
    prepared, _ = prepare(SIGNALS_ENV, "runaway")
    recorded = RecordedRun(store, prepared.runtime, EventWriter(store))
    try:
        recorded.kill("signal SIGTERM")
        outcome = await recorded.run()
    finally:
        prepared.cleanup()
        await store.close()
    assert outcome.stop_reason is StopReason.KILLED and outcome.model_calls == 0
    assert_recorded_killed_by(tmp_path / "s.db", signal.SIGTERM)


async def test_a_console_kill_while_litellm_loads_is_recorded_with_every_event(tmp_path) -> None:
    prepared, _ = prepare(SIGNALS_ENV, "runaway")
    link = RunSession.adopted(prepared, ApprovalQueue(), tmp_path / "s.db").link()
    try:
        link.kill("signal SIGTERM")  # before `drive`: the screen is not painted yet
        outcome = await link.drive()
    finally:
        prepared.cleanup()
    assert outcome is not None and outcome.stop_reason is StopReason.KILLED
    assert_recorded_killed_by(tmp_path / "s.db", signal.SIGTERM)


@pytest.mark.slow
def test_a_second_signal_while_stopping_loses_no_recorded_event(tmp_path) -> None:
    runner = Runner(tmp_path, "runaway")
    try:
        wait_until("the runaway run records events", lambda: runner.events() > 50)
        runner.proc.send_signal(signal.SIGTERM)
        runner.proc.send_signal(signal.SIGTERM)
        code, out, err = runner.finish()
    finally:
        runner.close()
    assert code == -signal.SIGTERM and "Traceback" not in err, err
    seqs = [seq for (seq,) in stored(runner.db, "SELECT seq FROM events ORDER BY seq")]
    assert seqs == list(range(1, len(seqs) + 1))
    ((kind,),) = stored(runner.db, "SELECT kind FROM events ORDER BY seq DESC LIMIT 1")
    # Either the kill was recorded before the second signal came, or the run was abandoned
    # (cancelled before its stop) with every event it had emitted committed.
    if "abandoned by signal SIGTERM before it recorded its stop" in err:
        assert kind != "run_stopped" and "stopped: killed" not in out
    else:
        assert_recorded_killed_by(runner.db, signal.SIGTERM)


@pytest.mark.slow
def test_sigterm_during_a_tool_ends_its_child_process_too(tmp_path) -> None:
    runner = Runner(tmp_path, "child")
    try:
        wait_until("the tool started its child", lambda: descendants(runner.proc.pid))
        runner.proc.send_signal(signal.SIGTERM)
        code, out, err = runner.finish()
        wait_until("the process group is empty", lambda: group_gone(runner.proc.pid), 10)
    finally:
        runner.close()
    assert code == -signal.SIGTERM
    assert "stopped: killed" in out and "Traceback" not in err, err
    assert_recorded_killed_by(runner.db, signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_sigterm_kills_the_console_s_live_run_and_says_farewell(tmp_path) -> None:
    db = tmp_path / "s.db"
    command = [str(LOOPDECK), "run", str(SIGNALS_ENV), "--script", "runaway", "--db", str(db)]
    terminal = Terminal(command)
    try:
        count = "SELECT count(*) FROM events"
        wait_until("the run records events", lambda: (stored(db, count) or [(0,)])[0][0] > 50)
        ((pid, run_id),) = stored(db, "SELECT pid, run_id FROM runs")
        os.kill(pid, signal.SIGTERM)
        screen = terminal.wait_for("EXITED")
    finally:
        terminal.close()
    assert f"run {run_id} · killed · replay: loopdeck replay {run_id}" in screen
    assert f"EXITED {128 + signal.SIGTERM}" in screen and "Traceback" not in screen
    assert_recorded_killed_by(db, signal.SIGTERM)
