"""Issue 38's items in the real `loopdeck` binary, in tmux at 80x24, 100x30 and 160x48, read
with capture-pane. Item 3 (what needs you in view) is `test_fleet_in_view.py`'s; item 4's
key line in words and the question's keys are `test_tmux_console.py`'s; the crash path of
item 1's console that fails is `test_console_failure.py`'s."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from conftest import SAMPLES
from test_tmux_console import LOOPDECK, Terminal, sizes

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
BROKEN = ("Traceback", "DuplicateID", "Error:")
STARTUP_S = 120  # a run's first events wait for LiteLLM's import, slow on a loaded machine


def _wait_lower(terminal: Terminal, text: str, timeout: float = 60.0) -> str:
    """The screen once it shows `text`, whatever its case (a key line's words are shortened
    and lower-cased on narrow screens)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        screen = terminal.screen()
        if text.lower() in screen.lower():
            return screen
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared; screen:\n{terminal.screen()}")


def _key_line(screen: str) -> str:
    return screen.rstrip().splitlines()[-1]


def _quit(terminal: Terminal) -> str:
    """`q` from the fleet with no live run: the console leaves, exit 0."""
    terminal.wait_for("loopdeck · fleet")
    # Pressed again if need be: a `q` right after an Escape reads as alt+q to the terminal.
    screen = _press_until(terminal, "q", "EXITED")
    assert "EXITED 0" in screen, screen
    return screen


def _focus_the_path_box(terminal: Terminal, timeout: float = 30.0) -> None:
    """`/` until the path box has the focus: the key line is then esc's alone (a letter typed
    before would run as a key: `i` opens the inbox)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        terminal.press("/")
        for _ in range(10):
            line = _key_line(terminal.screen())
            if "Env folder" not in line and "esc" in line.lower():
                return
            time.sleep(0.1)
    raise AssertionError(f"the path box never took the focus:\n{terminal.screen()}")


def _listed_again(terminal: Terminal, timeout: float = 30.0) -> str:
    """The list has the focus again once the folder is read: the key line offers `/`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        screen = terminal.screen()
        if "Env folder" in _key_line(screen):
            return screen
        time.sleep(0.1)
    raise AssertionError(f"the folder was never listed:\n{terminal.screen()}")


def _approve_until(terminal: Terminal, text: str, timeout: float = STARTUP_S) -> str:
    """`a` on each approval dialog (its border names it at every size) until `text` shows."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        screen = terminal.screen()
        if text in screen:
            return screen
        if "Approval · " in screen:
            terminal.press("a")
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared:\n{terminal.screen()}")


def _press_until(terminal: Terminal, key: str, text: str, timeout: float = 30.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        terminal.press(key)
        for _ in range(10):
            screen = terminal.screen()
            if text in screen:
                return screen
            time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared:\n{terminal.screen()}")


def _gone(terminal: Terminal, text: str, timeout: float = 30.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        screen = terminal.screen()
        if text not in screen:
            return screen
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never went:\n{terminal.screen()}")


# -- item 1: the chooser never crashes -------------------------------------------------------
@pytest.mark.slow  # a run started from the console: its LiteLLM import, seconds
@sizes
def test_an_env_folder_read_twice_then_started_never_crashes(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """fleet → n → / your folder → enter, then / → enter again (the DuplicateID crash), then
    enter starts its first script; the console stays up and leaves with exit 0."""
    desk = tmp_path / "desk"
    shutil.copytree(SAMPLES / "order_support", desk, ignore=shutil.ignore_patterns("__py*"))
    terminal = Terminal([str(LOOPDECK), "console", "--db", str(tmp_path / "s.db")], size=size)
    try:
        terminal.wait_for("n starts a run")
        terminal.press("n")
        terminal.wait_for("Start here")
        for typed in (str(desk), ""):  # the box keeps the path: read it again as it is
            _focus_the_path_box(terminal)
            if typed:
                terminal.press("-l", typed)
            terminal.press("Enter")
            screen = _listed_again(terminal)
            assert "Your env folder" in screen and not any(w in screen for w in BROKEN), screen
        folder = screen.split("Your env folder")[1].split("Start here")[0]
        assert folder.count("order_support · ask-then-act") == 1, screen  # listed once
        terminal.press("Enter")  # its first script, highlighted at the top
        _wait_lower(terminal, "esc fleet")
        terminal.press("C-q")  # over the question's answer box too
        terminal.wait_for("y kill and quit")
        terminal.press("y")
        screen = _quit(terminal)
        assert not any(word in screen for word in BROKEN), screen
    finally:
        terminal.close()


# -- item 2: `o` then `y` on an ended run of this console -------------------------------------
@pytest.mark.slow  # a run to its end: seconds
@sizes
def test_o_then_y_on_an_ended_run_records_it_on_screen(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    command = [str(LOOPDECK), "run", str(SAMPLES / "order_support"), "--script"]
    command += ["unknown-outcome", "--db", str(tmp_path / "s.db")]
    terminal = Terminal(command, size=size)
    try:
        _approve_until(terminal, "Stopped · goal_met")  # the mail, then the address
        terminal.wait_for("1 outcome unknown · o")
        terminal.press("o")
        screen = terminal.wait_for("y it took effect")
        assert "error OUTCOME_UNKNOWN" in screen and "esc later" in screen  # the error, shown
        terminal.press("y")
        terminal.wait_for("c2: applied, recorded")
        screen = _gone(terminal, "outcome unknown")  # the calls' title as the toast says
        assert "Outcome?" not in screen and "failed" not in screen, screen
        terminal.press("q")
        assert "EXITED 0" in terminal.wait_for("EXITED")
    finally:
        terminal.close()


# -- item 4: a stopped run fits; `m` on it takes what is typed, never as keys -----------------
@pytest.mark.slow  # a run to its end: seconds
@sizes
def test_a_stopped_run_fits_and_m_on_it_swallows_the_letters(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    command = [str(LOOPDECK), "run", str(SAMPLES / "order_support"), "--script", "escalate"]
    terminal = Terminal([*command, "--db", str(tmp_path / "s.db")], size=size)
    try:
        screen = terminal.wait_for("Stopped · handoff", timeout=STARTUP_S)
        lines = screen.rstrip("\n").splitlines()
        assert len(lines) <= size[1] and "q" in _key_line(screen).lower(), screen
        _press_until(terminal, "m", "The run has ended")  # once its keys know it ended
        terminal.press("-l", "isk")  # the inbox, stop, kill keys: typed, not run
        screen = terminal.wait_for("isk")
        assert "Approvals inbox" not in screen and "The run has ended" in screen
        terminal.press("Enter")  # closes, nothing sent
        screen = terminal.press_until_gone("Escape", "The run has ended")
        assert "Stopped · handoff" in screen
        assert "EXITED 0" in _press_until(terminal, "q", "EXITED")  # not alt+q after Escape
    finally:
        terminal.close()


# -- item 5: the chooser is a tour ------------------------------------------------------------
@sizes
def test_the_chooser_opens_on_the_tour(tmp_path: Path, size: tuple[int, int]) -> None:
    terminal = Terminal([str(LOOPDECK), "console", "--db", str(tmp_path / "s.db")], size=size)
    try:
        terminal.wait_for("n starts a run")
        terminal.press("n")
        terminal.wait_for("Start here")
        screen = terminal.wait_for("Env folder")  # the chooser's key line, a frame after it
        lines = screen.splitlines()
        first = next(i for i, line in enumerate(lines) if "Start here" in line)
        tour = "\n".join(lines[first : first + 4])
        assert "approve a write" in tour and "order_support · solve" in tour, screen
        assert "Looks up the order" in tour  # each with its one line
        if "calc_acp · dies" in screen:  # misbehaviours apart, after the tour
            assert screen.index("calc_acp · dies") > screen.index("More scripts: misbehaviour")
            assert screen.index("More scripts") > screen.index("Start here"), screen
        assert "Env folder" in _key_line(screen), screen
        terminal.press("Escape")
        _quit(terminal)
    finally:
        terminal.close()


# -- item 6: a write of file content is a diff ------------------------------------------------
@pytest.mark.slow  # a run's LiteLLM import and first calls: seconds
@sizes
def test_a_file_write_is_asked_as_a_diff_with_its_keys_in_view(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    command = [str(LOOPDECK), "run", str(SAMPLES / "repo_triage"), "--script", "solve"]
    terminal = Terminal([*command, "--db", str(tmp_path / "s.db")], size=size)
    try:
        screen = terminal.wait_for("+        return a + b", timeout=STARTUP_S)
        assert "--- a/calculator.py" in screen and "-        return a - b" in screen
        assert "a approve" in screen and "r reject" in screen  # the keys, below the diff
        _approve_until(terminal, "GOAL_MET")
        terminal.press("q")
        assert "EXITED 0" in terminal.wait_for("EXITED")
    finally:
        terminal.close()


# -- item 7: the empty fleet says n; the palette's keys are the console's ---------------------
@sizes
def test_the_empty_fleet_says_n_and_the_keys_screen_is_the_consoles(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    terminal = Terminal([str(LOOPDECK), "console", "--db", str(tmp_path / "s.db")], size=size)
    try:
        terminal.wait_for("n starts a run")
        terminal.press("C-p")
        terminal.wait_for("Search for commands")
        terminal.press("-l", "keys")
        terminal.wait_for("every key of this screen")
        terminal.press("Enter")
        screen = terminal.wait_for("On the fleet")
        for words in ("n      New run", "Everywhere", "esc back"):
            assert words in screen, screen
        # At 80x24 the new store's toast takes the foot of the screen: the list scrolls to it.
        for _ in range(20):
            if "ctrl+p     Commands" in terminal.screen():
                break
            terminal.press("Down")
            terminal.wait_for("esc back")
        assert "ctrl+p     Commands" in terminal.screen(), terminal.screen()
        terminal.press_until_gone("Escape", "On the fleet")
        _quit(terminal)
    finally:
        terminal.close()
