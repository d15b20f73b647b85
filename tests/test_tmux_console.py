"""The real `loopdeck` binary in a real terminal: tmux at 160x48, read with capture-pane."""

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import SAMPLES

LOOPDECK = Path(sys.executable).with_name("loopdeck")

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
# Every size a person's terminal is checked at: 80x24, the tightest, in `make test`; the others
# in `make stress` (each a real console's start: seconds).
sizes = pytest.mark.parametrize(
    "size",
    [
        pytest.param((80, 24), id="80x24"),
        pytest.param((100, 30), id="100x30", marks=pytest.mark.slow),
        pytest.param((160, 48), id="160x48", marks=pytest.mark.slow),
    ],
)


class Terminal:
    def __init__(self, command: list[str], size: tuple[int, int] = (160, 48)) -> None:
        self.name = f"loopdeck-test-{uuid.uuid4().hex[:8]}"
        # A server of its own (-L): a new session on the shared server can race that server's
        # exit when another test just closed its last session ("server exited unexpectedly").
        self.tmux = ["tmux", "-L", self.name]
        width, height = size
        subprocess.run(
            [*self.tmux, "new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height),
             # Textual sizes itself from COLUMNS/LINES when set: let the pane decide.
             "env -u COLUMNS -u LINES " + " ".join(command) + "; echo EXITED $?; sleep 30"],
            check=True,
        )  # fmt: skip

    def screen(self) -> str:
        proc = subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-t", self.name], capture_output=True, text=True
        )
        return proc.stdout

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared; screen:\n{self.screen()}")

    def press_until_gone(self, key: str, text: str, timeout: float = 30.0) -> str:
        """Press `key` until `text` leaves the screen (a key sent before a screen is ready to
        take it is pressed again)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.press(key)
            for _ in range(10):
                screen = self.screen()
                if text not in screen:
                    return screen
                time.sleep(0.1)
        raise AssertionError(f"{text!r} never went away; screen:\n{self.screen()}")

    def press(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, *keys], check=True)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], check=False)
        tmp = Path(os.environ.get("TMUX_TMPDIR", "/tmp"))
        (tmp / f"tmux-{os.getuid()}" / self.name).unlink(missing_ok=True)  # its socket


# Several seconds each: in `make stress` (CI runs both targets); the transcript test stays.
@pytest.mark.slow
def test_order_support_approved_in_a_real_terminal(tmp_path) -> None:
    command = [str(LOOPDECK), "run", str(SAMPLES / "order_support"), "--script", "solve"]
    terminal = Terminal([*command, "--db", str(tmp_path / "s.db")])
    try:
        screen = terminal.wait_for("Approve this write?")
        assert "update_delivery_address" in screen and "receipt valid for" in screen
        terminal.press("a")
        terminal.wait_for("GOAL_MET")
        # the panels are painted in one frame, but tmux can read the pane mid-write: wait
        terminal.wait_for("round 1  PASS")
        terminal.press("q")
        assert "EXITED 0" in terminal.wait_for("EXITED")
    finally:
        terminal.close()


@pytest.mark.slow
def test_wrong_guess_read_in_the_transcript_then_approved(tmp_path) -> None:
    """The operator finds the live database's name in get_status's full result, approves
    both writes, reads the whole stop detail, and `q` prints the run id."""
    command = [str(LOOPDECK), "run", str(SAMPLES / "service_outage"), "--script", "wrong-guess"]
    terminal = Terminal([*command, "--db", str(tmp_path / "s.db")])
    try:
        terminal.wait_for("Approve this write?")
        terminal.press_until_gone("Escape", "Approve this write?")
        terminal.press("t")
        terminal.wait_for("esc returns to the run")
        terminal.press("/")
        terminal.wait_for("search the transcript")
        terminal.press("-l", "orders-db-v2")
        terminal.press("Enter")
        screen = terminal.wait_for("match 1 of")
        assert "last_error" in screen and "orders-db-v2" in screen
        terminal.press_until_gone("Escape", "esc returns to the run")
        terminal.press("w")
        terminal.wait_for("set_config")
        terminal.press("a")
        terminal.wait_for("scale_service")
        terminal.wait_for("Approve this write?")
        terminal.press("a")
        # round 2 repeats get_status: the loop is put to the operator, who stops the run
        terminal.wait_for("repeats a call from the same state")
        terminal.wait_for("s stop the run")
        terminal.press("s")  # over the guard's question, the stop key is its answer
        terminal.wait_for("Stopped · no_progress")
        # the whole stop detail, not its first 26 characters
        terminal.wait_for(
            "get_status repeated with the same arguments from the same state (c5); stopped by "
            "console"
        )
        terminal.press("q")
        screen = terminal.wait_for("EXITED")
        assert "EXITED 0" in screen
        assert "no_progress · replay: loopdeck replay" in screen
    finally:
        terminal.close()


@pytest.mark.slow
@sizes
def test_the_agents_question_answered_in_a_real_terminal(tmp_path, size) -> None:
    """The question sits over the live run with its keys on screen at every size; a letter
    is typed into the answer, the answer reaches the model, the run reaches its goal."""
    command = [str(LOOPDECK), "run", str(SAMPLES / "order_support"), "--script", "ask-then-act"]
    terminal = Terminal([*command, "--db", str(tmp_path / "s.db")], size=size)
    try:
        screen = terminal.wait_for("The agent asks")
        assert "Question q1" in screen and "ORD-1042 or ORD-2001" in screen
        assert "ctrl+k kill" in terminal.wait_for("enter answer")
        assert "awaiting_answer" in screen and "1 question waiting" in screen
        terminal.press("-l", "ORD-1042, keep it")
        terminal.wait_for("ORD-1042, keep it")
        terminal.press("Enter")
        terminal.wait_for("Approve this write?")
        terminal.press("a")
        terminal.wait_for("GOAL_MET")
        terminal.press("q")
        assert "EXITED 0" in terminal.wait_for("EXITED")
    finally:
        terminal.close()


@pytest.mark.slow
def test_three_headless_runs_approved_from_the_inbox(tmp_path) -> None:
    from store_helpers import last_json, start_runner

    db = tmp_path / "s.db"
    runners = [
        start_runner(SAMPLES / "order_support", "solve", db, "--approve", "wait") for _ in range(3)
    ]
    terminal = Terminal([str(LOOPDECK), "console", "--db", str(db)])
    try:
        terminal.wait_for("3 approvals waiting", timeout=60)
        terminal.press("i")
        terminal.wait_for("3 writes waiting across all runs")
        terminal.press("a")
        terminal.wait_for("2 writes waiting across all runs")
        terminal.press("a")
        terminal.wait_for("1 write waiting across all runs")
        terminal.press("a")
        terminal.wait_for("0 writes waiting across all runs")
        for runner in runners:
            out, _ = runner.communicate(timeout=60)
            assert last_json(out)["stop_reason"] == "goal_met"
        terminal.press("Escape")
        # The fleet first: the runs' "stopped: goal_met" toasts also show over the inbox, and a
        # `q` sent right after Escape reads as alt+q to the terminal's parser.
        terminal.wait_for("loopdeck · fleet")
        end = time.monotonic() + 30
        while terminal.screen().count("goal_met") < 3:  # the fleet catches up with all three
            assert time.monotonic() < end, terminal.screen()
            time.sleep(0.1)
        terminal.press("q")
        assert "EXITED 0" in terminal.wait_for("EXITED")
    finally:
        terminal.close()
        for runner in runners:
            runner.kill()
            runner.wait()


# Several seconds of subprocesses or console: in `make stress` (CI runs both).
@pytest.mark.slow
def test_the_attach_farewell_names_the_store_it_was_given(tmp_path) -> None:
    """`attach ID --db X` then `q`: the replay hint carries `--db X`, or replay finds no run."""
    from store_helpers import last_json, start_runner

    db = tmp_path / "s.db"
    runner = start_runner(SAMPLES / "order_support", "solve", db, "--approve", "auto")
    out, _ = runner.communicate(timeout=60)
    run_id = last_json(out)["run_id"]
    terminal = Terminal([str(LOOPDECK), "attach", run_id, "--db", str(db)])
    try:
        terminal.wait_for("goal_met")
        terminal.press("q")
        terminal.wait_for("EXITED")
        said = terminal.screen().replace("\n", "")  # the line may wrap at the pane's width
        assert f"replay: loopdeck replay {run_id} --db {db}" in said
    finally:
        terminal.close()


@sizes
def test_the_run_keys_read_as_words_in_a_real_terminal(tmp_path, size) -> None:
    """`loopdeck run`'s key line names its keys in words at every size, never bare letters."""
    command = [str(LOOPDECK), "run", str(SAMPLES / "order_support"), "--script", "solve"]
    terminal = Terminal([*command, "--db", str(tmp_path / "s.db")], size=size)
    try:
        terminal.wait_for("Approve this write?")
        screen = terminal.press_until_gone("Escape", "Approve this write?")
        screen = terminal.wait_for("Inbox" if size[0] >= 160 else "i inbox")
        keys = screen.rstrip().splitlines()[-1].lower()
        for words in ("s stop", "k kill", "p pause", "q quit", "i inbox"):
            assert words in keys, screen
        for key in "wtm":  # approvals, transcript, message: a word each, whatever its length
            assert f" {key} " in keys and f" {key}  " not in keys, screen
        terminal.press("q")
        terminal.wait_for("y kill and quit")
        terminal.press("y")
        assert "EXITED" in terminal.wait_for("EXITED")
    finally:
        terminal.close()
