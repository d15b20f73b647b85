"""An MCP tool that reports progress (`notifications/progress`) is timed by it, as MCP advises:
each report gives the call its timeout again, up to `[mcp] progress_max_s` from its start; a
call that goes quiet, or runs past that, is a timeout naming the last progress reported (a
write's outcome then unknown). And a tool whose hints say both read-only and destructive is a
write. The server is `tests/envs/mcp_progress/server.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Recorder

from loopdeck.core.events import CallStatus, EventBus
from loopdeck.operator.launch import RunOptions, prepare_run

ENV = Path(__file__).parent / "envs" / "mcp_progress"


def _prepared(script: str, *settings: str) -> Any:
    bus = EventBus()
    bus.subscribe(Recorder())
    options = RunOptions(env=str(ENV), script=script, approve="auto", settings=list(settings))
    return prepare_run(options, bus=bus)


async def _run(script: str, *settings: str) -> Any:
    prepared = _prepared(script, *settings)
    try:
        return await prepared.runtime.run()
    finally:
        prepared.cleanup()


@pytest.mark.slow  # two seconds of work, on a server's start and stop: over three in all
async def test_a_call_reporting_progress_runs_past_its_timeout_to_its_end() -> None:
    """Two seconds of work against a one-second timeout, a report every tenth of a second:
    it ends with its answer, once, never cut and tried again."""
    outcome = await _run("steady")
    [call] = outcome.calls
    assert call.status is CallStatus.EXECUTED, call.result
    assert call.result is not None and call.result["data"]["text"] == "done in 20 steps"
    assert call.retries == 0


async def test_a_call_that_goes_quiet_is_cut_naming_its_last_progress() -> None:
    outcome = await _run("quiet")
    [call] = outcome.calls
    assert call.status is CallStatus.OUTCOME_UNKNOWN  # a write cut off: it may have run
    said = call.result["error"]["message"] if call.result else ""
    assert "quiet reported no progress for 1s; its last progress 3/10: copying" in said


async def test_a_call_reporting_progress_ends_at_progress_max_s() -> None:
    outcome = await _run("endless", "mcp.progress_max_s=2")
    [call] = outcome.calls
    assert call.status is CallStatus.OUTCOME_UNKNOWN
    said = call.result["error"]["message"] if call.result else ""
    assert "endless still running after 2s" in said and "its last progress " in said


def test_a_tool_that_says_read_only_and_destructive_is_a_write() -> None:
    prepared = _prepared("steady")
    try:
        wipe = prepared.runtime.tools["wipe"]
    finally:
        prepared.cleanup()
    assert (wipe.risk, wipe.risk_source) == (
        "write",
        "server says read-only and destructive: treated as write",
    )
