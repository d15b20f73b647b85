"""The goal check's freeze (workdir/freeze.py) leaves nothing stopped: a run cancelled while
the freeze is under way thaws every process it signalled; and a guardian ending a stopped
process lets it go on (SIGCONT after SIGTERM), so its SIGTERM handler runs rather than a
SIGKILL after the grace."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import loopdeck.acp_env.loop as acp_loop
from loopdeck.acp_env.loop import AcpLoop
from loopdeck.workdir.guardian import descendants

HANDLER = """
import signal, sys, time
def bye(*_):
    open("bye", "w").write("bye")
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
open("ready", "w").write("ready")
time.sleep(60)
"""


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as file:
        stat = file.read()
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


def _wait_for(test: Any, timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while not test():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


async def test_a_check_cancelled_amid_the_freeze_thaws_what_it_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The freeze's thread still running (slow here) when the run is cancelled: each process
    it stopped goes on at once, none left stopped for the agent's stop to SIGKILL."""
    agent = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        _wait_for(lambda: len(descendants(agent.pid)) == 2)
        real = acp_loop.freeze

        def slow(*args: Any) -> Any:
            got = real(*args)
            time.sleep(1.0)  # the freeze's thread, still under way at the cancel
            return got

        monkeypatch.setattr(acp_loop, "freeze", slow)
        terminals = SimpleNamespace(terminals=SimpleNamespace(guardians={}))
        loop = SimpleNamespace(
            agent=SimpleNamespace(proc=agent), calls=SimpleNamespace(terminals=terminals)
        )
        checking = asyncio.ensure_future(AcpLoop._checking(loop, 1, {}))  # type: ignore[arg-type]
        await asyncio.sleep(0.3)
        sleeps = descendants(agent.pid)
        assert {_state(pid) for pid in sleeps} == {"T"}  # frozen
        checking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await checking
        assert "T" not in {_state(pid) for pid in sleeps}  # thawed at the cancel
        await asyncio.sleep(1.0)  # the freeze's thread done: nothing stopped since
        assert "T" not in {_state(pid) for pid in descendants(agent.pid)}
    finally:
        agent.kill()
        agent.wait()
        for pid in descendants(agent.pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)


def test_a_stopped_command_runs_its_sigterm_handler_when_the_guardian_ends_it(
    tmp_path: Path,
) -> None:
    guardian = subprocess.Popen(
        [sys.executable, "-m", "loopdeck.workdir.guardian", sys.executable, "-c", HANDLER],
        cwd=tmp_path,
    )
    try:
        _wait_for(lambda: (tmp_path / "ready").exists())
        [command] = descendants(guardian.pid)
        subprocess.run(["kill", "-STOP", str(command)], check=True)
        _wait_for(lambda: _state(command) == "T")
        guardian.terminate()
        guardian.wait(timeout=20)
    finally:
        guardian.kill()
    assert (tmp_path / "bye").read_text() == "bye"  # its handler ran, not a SIGKILL
