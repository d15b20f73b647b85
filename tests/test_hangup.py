"""Every way a run's process is told to go is recorded: SIGHUP (a terminal closed, an SSH session
dropped) as SIGTERM and SIGINT are, before the run's row exists too, with its terminal gone
(writes to it neither raise nor block), and the process ends by the signal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import SAMPLES
from test_stop_signals import (
    LOOPDECK,
    STARTUP_S,
    assert_recorded_killed_by,
    group_gone,
    stored,
    wait_until,
)
from test_tmux_console import Terminal

from loopdeck import stop_signals
from loopdeck.stop_signals import OutlivingStream, StopSignals

ORDER_SUPPORT = SAMPLES / "order_support"  # its `solve` script's write waits on `--approve wait`
ENDED_S = 60  # from the signal to the process's end: the run records its stop, then it ends

needs_hangups = pytest.mark.skipif(
    signal.getsignal(signal.SIGHUP) == signal.SIG_IGN,
    reason="SIGHUP is ignored here (nohup): the binary started from here keeps ignoring it",
)
SIGNALS = [
    pytest.param(signal.SIGHUP, marks=needs_hangups, id="SIGHUP"),
    pytest.param(signal.SIGTERM, id="SIGTERM"),
    pytest.param(signal.SIGINT, id="SIGINT"),
]


class Headless:
    """`loopdeck run` headless, its writes waiting (`--approve wait`), in a session of its own;
    its stdout and stderr a terminal (a pty, not its controlling one: hanging it up sends no
    signal) that the test closes, or files."""

    def __init__(self, tmp_path: Path, *, terminal: bool) -> None:
        self.db = tmp_path / "s.db"
        self.out, self.err = tmp_path / "out.txt", tmp_path / "err.txt"
        self.master: int | None = None
        self.shown = ""
        command = [str(LOOPDECK), "run", str(ORDER_SUPPORT), "--script", "solve", "--headless",
                   "--approve", "wait", "--db", str(self.db)]  # fmt: skip
        if terminal:
            self.master, slave = pty.openpty()
            try:
                self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=slave,
                                             stderr=slave, start_new_session=True)  # fmt: skip
            finally:
                os.close(slave)
            return
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, start_new_session=True)  # fmt: skip

    def read_until(self, text: str) -> str:
        """What its terminal showed, read until `text` is in it."""
        assert self.master is not None
        end = time.monotonic() + STARTUP_S
        while text not in self.shown and time.monotonic() < end:
            if select.select([self.master], [], [], 0.1)[0]:
                self.shown += os.read(self.master, 4096).decode(errors="replace")
            self.check_alive()
        assert text in self.shown, self.shown
        return self.shown

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"it ended early ({self.proc.returncode}): {self.shown}")

    def waits(self) -> bool:
        self.check_alive()
        return stored(self.db, "SELECT state FROM runs") == [("awaiting_approval",)]

    def takes(self, *signals: signal.Signals) -> bool:
        """Whether the process has its own handler for each of `signals` (/proc's SigCgt)."""
        self.check_alive()
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        (caught,) = [line.split()[1] for line in status.splitlines() if line.startswith("SigCgt")]
        return all(int(caught, 16) >> (sig - 1) & 1 for sig in signals)

    def hang_up(self) -> None:
        """Its terminal closes: a write to it now fails (EIO)."""
        assert self.master is not None
        os.close(self.master)
        self.master = None

    def ended(self) -> int:
        return self.proc.wait(timeout=ENDED_S)

    def close(self) -> None:
        if self.master is not None:
            os.close(self.master)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


@pytest.mark.slow  # seconds: the binary's start, the run, its stop
@pytest.mark.parametrize("sig", SIGNALS)
def test_a_signal_to_a_waiting_run_is_recorded_though_its_terminal_is_gone(tmp_path, sig) -> None:
    run = Headless(tmp_path, terminal=True)
    try:
        run.read_until("writes wait for `loopdeck approve")
        wait_until("the run waits on its write", run.waits)
        run.hang_up()
        run.proc.send_signal(sig)
        code = run.ended()
    finally:
        run.close()
    assert code == -sig  # ended by the signal, not by a write to the closed terminal
    assert_recorded_killed_by(run.db, sig)
    assert group_gone(run.proc.pid)


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS)
def test_a_signal_as_the_process_starts_still_records_its_run_and_stop(tmp_path, sig) -> None:
    """Sent as soon as the process takes stop signals, its terminal closed with it: long
    before the run is prepared, so long before its row exists."""
    run = Headless(tmp_path, terminal=True)
    try:
        wait_until("the process takes stop signals", lambda: run.takes(signal.SIGTERM, sig))
        run.hang_up()
        run.proc.send_signal(sig)
        code = run.ended()
    finally:
        run.close()
    assert code == -sig
    assert_recorded_killed_by(run.db, sig)


@needs_hangups
@pytest.mark.slow
def test_a_sighup_from_elsewhere_says_the_summary_where_the_terminal_is_left(tmp_path) -> None:
    run = Headless(tmp_path, terminal=False)
    try:
        wait_until("the run waits on its write", run.waits)
        run.proc.send_signal(signal.SIGHUP)
        code = run.ended()
    finally:
        run.close()
    out, err = run.out.read_text(), run.err.read_text()
    assert code == -signal.SIGHUP
    assert "stopped: killed — killed by signal SIGHUP" in out and "Traceback" not in err, err
    assert_recorded_killed_by(run.db, signal.SIGHUP)


def process_ended(pid: int) -> bool:
    """Gone, or a zombie (its parent, after tmux's shell, is whoever adopted it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


@needs_hangups
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_console_whose_terminal_is_killed_records_its_run_stopped(tmp_path) -> None:
    db = tmp_path / "s.db"
    terminal = Terminal([str(LOOPDECK), "run", str(ORDER_SUPPORT), "--script", "solve",
                         "--db", str(db)])  # fmt: skip
    pid = None
    try:
        terminal.wait_for("Approve this write?", timeout=STARTUP_S)
        state = "SELECT state FROM runs"
        wait_until("the run waits", lambda: stored(db, state) == [("awaiting_approval",)])
        ((pid,),) = stored(db, "SELECT pid FROM runs")
        # The pane closes: its terminal hangs up, and the console gets SIGHUP.
        subprocess.run([*terminal.tmux, "kill-session", "-t", terminal.name], check=True)
        wait_until("the console's process ends", lambda: process_ended(pid), ENDED_S)
    finally:
        terminal.close()
        if pid is not None and not process_ended(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert_recorded_killed_by(db, signal.SIGHUP)


@contextlib.contextmanager
def signals_restored():
    """This process's stop-signal handlers and `ended_by` as they were, whatever the test did."""
    before = {sig: signal.getsignal(sig) for sig in stop_signals.STOP_SIGNALS}
    try:
        yield
    finally:
        stop_signals.ended_by = None
        for sig, handler in before.items():
            if handler is not None:
                signal.signal(sig, handler)


async def until(what: str, condition) -> None:
    end = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < end, f"never: {what}"
        await asyncio.sleep(0.01)


def test_a_signal_before_any_loop_takes_them_is_kept_for_the_run() -> None:
    """The run command's imports: a SIGTERM then is kept, and kills the run once aimed."""
    stops: list[str] = []

    async def aimed() -> None:
        signals = StopSignals()
        assert signals.install()
        signals.aim(stops.append)
        await until("the kept signal is delivered", lambda: stops)
        signals.remove()

    with signals_restored():
        with stop_signals.kept():
            os.kill(os.getpid(), signal.SIGTERM)
            asyncio.run(aimed())
        assert stop_signals.ended_by is signal.SIGTERM
    assert stops == ["signal SIGTERM"]


@needs_hangups
async def test_a_hangup_stops_once_and_a_nohup_run_keeps_ignoring_it() -> None:
    stops: list[str] = []
    harder: list[str] = []
    with signals_restored():
        # Swallowed, should `install` leave SIGHUP alone: this test fails, the session goes on.
        signal.signal(signal.SIGHUP, lambda *_: None)
        signals = StopSignals()
        assert signals.install()
        signals.aim(stops.append, harder.append)
        os.kill(os.getpid(), signal.SIGHUP)
        await until("the hangup stops the run", lambda: stops)
        os.kill(os.getpid(), signal.SIGHUP)  # the closing terminal says it again
        os.kill(os.getpid(), signal.SIGTERM)
        await until("the SIGTERM stops it harder", lambda: harder)
        signals.remove()
        assert (stops, harder) == (["signal SIGHUP"], ["signal SIGTERM"])

        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # started by `nohup`
        nohup = StopSignals()
        assert nohup.install()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        nohup.remove()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN


@pytest.mark.parametrize("gone", ["terminal", "pipe"])
def test_a_write_where_the_terminal_or_reader_is_gone_neither_raises_nor_blocks(gone) -> None:
    if gone == "terminal":
        reader, writer = pty.openpty()
    else:
        reader, writer = os.pipe()
    with open(writer, "w", buffering=1, encoding="utf-8") as stream:  # line-buffered, as stderr
        outliving = OutlivingStream(stream)
        os.close(reader)  # the terminal hangs up (EIO), or the pipe's reader leaves (EPIPE)
        for _ in range(1000):  # far more than a pipe or a terminal holds unread
            print("the summary, line after line", file=outliving)
        outliving.flush()
        assert os.path.samestat(os.fstat(writer), os.stat(os.devnull))
