"""An MCP server that dies while the run waits for something else (an approval) stops the run
at once, `tool_failure`, naming the server and its exit status, as an ACP agent's death does:
its pending write is withdrawn, `pending` no longer lists it and a late approve is refused by
name. The server is `tests/envs/mcp_faults/server.py`, killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import Recorder
from mcp_processes import servers_below
from store_helpers import last_json, loopdeck, start_runner, wait_for_pending

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import CallStatus, EventBus
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run

FAULTS = Path(__file__).parent / "envs" / "mcp_faults"
SERVER = str(FAULTS / "server.py")
KILLED = "went away (exit status 137)"  # the guardian's status for a server ended by SIGKILL
BOUND_S = 120.0  # a loaded 2-core machine's; the run ends within a second or two when idle


def _kill_the_server(runner: int) -> None:
    """SIGKILL to the server below `runner` (another test session's servers are left be)."""
    pids = servers_below(runner, SERVER)
    assert pids, "the server is not running"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


class _NobodyDecides:
    """Kills the server as the write is asked for, then waits for ever: only the server's
    death can end the run."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request.call_id)
        _kill_the_server(os.getpid())
        await asyncio.Event().wait()
        raise AssertionError("never decided")


async def test_a_server_killed_while_a_write_waits_stops_the_run_at_once() -> None:
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    approver = _NobodyDecides()
    options = RunOptions(env=str(FAULTS), script="solve", approve="auto")
    prepared = prepare_run(options, approver=approver, bus=bus)
    try:
        outcome = await asyncio.wait_for(prepared.runtime.run(), BOUND_S)
    finally:
        prepared.cleanup()
    assert approver.asked == ["c1"]
    assert outcome.stop_reason is StopReason.TOOL_FAILURE, outcome.detail
    assert outcome.detail.startswith("MCP server `") and "server.py`" in outcome.detail
    assert KILLED in outcome.detail, outcome.detail
    assert [call.status for call in outcome.calls] == [CallStatus.WITHDRAWN]
    assert [e.call_id for e in recorder.kinds("approval_withdrawn")] == ["c1"]


@pytest.mark.slow  # a runner and two CLI processes, seconds: `make stress` runs it
async def test_pending_forgets_the_write_of_a_dead_server_and_approve_refuses_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    runner = start_runner(FAULTS, "solve", db, "--approve", "wait")
    try:
        pending = await wait_for_pending(db, BOUND_S, "c1")
        _kill_the_server(runner.pid)
        out, err = await asyncio.to_thread(runner.communicate, timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        raise AssertionError("the run still waits on a dead server's write") from None
    finally:
        runner.kill()
    outcome = last_json(out)
    assert outcome["stop_reason"] == "tool_failure", err
    assert "server.py`" in outcome["detail"] and KILLED in outcome["detail"], outcome["detail"]
    run_id = pending["run_id"]
    listed = loopdeck("pending", "--json", db=db)
    assert listed.returncode == 0, listed.stderr
    assert "c1" not in listed.stdout
    late = loopdeck("approve", run_id, "c1", db=db)
    assert late.returncode != 0, late.stdout
    assert "c1" in late.stderr + late.stdout
