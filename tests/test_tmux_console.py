"""The real `loopdeck` binary in a real terminal: tmux at 160x48, read with capture-pane."""

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


class Terminal:
    def __init__(self, command: list[str], size: tuple[int, int] = (160, 48)) -> None:
        self.name = f"loopdeck-test-{uuid.uuid4().hex[:8]}"
        width, height = size
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height),
             " ".join(command) + "; echo EXITED $?; sleep 30"],
            check=True,
        )  # fmt: skip

    def screen(self) -> str:
        proc = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True
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

    def press(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], check=False)


def test_order_support_approved_in_a_real_terminal(tmp_path) -> None:
    command = [str(LOOPDECK), "run", str(SAMPLES / "order_support"), "--script", "solve"]
    terminal = Terminal([*command, "--db", str(tmp_path / "s.db")])
    try:
        screen = terminal.wait_for("Approve this write?")
        assert "update_delivery_address" in screen and "receipt expires in" in screen
        terminal.press("a")
        screen = terminal.wait_for("GOAL_MET")
        assert "round 1  PASS" in screen
        terminal.press("q")
        assert "EXITED 0" in terminal.wait_for("EXITED")
    finally:
        terminal.close()
