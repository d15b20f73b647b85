"""MCP edges (issue 36, item 8): a server gone while a write waits stops the run `tool_failure`
naming it, and every later call and read fails at once; a large state is shown to the model
capped but hashed whole; a snapshot entry that is not read-only refuses the run; what a server
writes that is not JSON-RPC is one warning naming it, never a traceback. The fake server is
`tests/envs/mcp_faults/server.py`; `@modelcontextprotocol/server-memory` from npm is the real
one (slow)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Recorder
from mcp_processes import servers_below

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.dispatcher import RESULT_CHAR_CAP
from loopdeck.core.events import CallStatus, EventBus
from loopdeck.core.prompts import planner_messages, react_messages
from loopdeck.core.scenario import ScenarioError
from loopdeck.core.states import StopReason
from loopdeck.core.text import TRUNCATION_MARK
from loopdeck.mcp_env.config import McpConfig
from loopdeck.mcp_env.connection import McpConnection, ServerFailed
from loopdeck.operator.launch import RunOptions, prepare_run

FAULTS = Path(__file__).parent / "envs" / "mcp_faults"
SERVER = str(FAULTS / "server.py")
SAID_ON_STDERR = "faults server: stopped by a signal, state lost"


def _prepared(
    script: str, *settings: str, approve: str = "auto", approver: Any = None
) -> tuple[Any, Recorder]:
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    options = RunOptions(
        env=str(FAULTS),
        script=script,
        approve=approve,  # type: ignore[arg-type]
        settings=list(settings),
    )
    return prepare_run(options, approver=approver, bus=bus), recorder


async def _run(script: str, *settings: str, approver: Any = None) -> tuple[Any, Recorder]:
    prepared, recorder = _prepared(script, *settings, approver=approver)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return outcome, recorder


def _servers() -> list[int]:
    return servers_below(os.getpid(), SERVER)


async def _stop_the_server() -> None:
    """SIGTERM to the fake server (it says so on stderr and exits), waited until it is gone."""
    for pid in _servers():
        os.kill(pid, signal.SIGTERM)
    while _servers():
        await asyncio.sleep(0.02)


class _ServerDiesFirst:
    """Approves each write, but only once the server has died under it."""

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        await _stop_the_server()
        return ApprovalDecision(call_id=request.call_id, approved=True, by="test")


# -- 1. a server gone ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "snapshot", ['[{resource = "faults://state"}]', '[{tool = "peek"}]'], ids=["resource", "tool"]
)
async def test_a_server_gone_while_a_write_waits_stops_the_run_naming_it(snapshot: str) -> None:
    outcome, _ = await _run("solve", f"mcp.snapshot={snapshot}", approver=_ServerDiesFirst())
    assert outcome.stop_reason is StopReason.TOOL_FAILURE, outcome.detail
    assert outcome.detail.startswith("MCP server `") and "server.py` went away" in outcome.detail
    assert SAID_ON_STDERR in outcome.detail  # its stderr's tail
    assert [call.status for call in outcome.calls] == [CallStatus.WITHDRAWN]  # it never ran
    assert _servers() == []


async def test_every_call_and_read_against_a_gone_server_fails_at_once(tmp_path: Path) -> None:
    config = McpConfig(command=[sys.executable, SERVER], snapshot="none")
    connection = McpConnection(config, tmp_path, tmp_path / "stderr.log")
    await asyncio.to_thread(connection.start)
    try:
        await _stop_the_server()
        # An hour's timeout each: a call that waited for it would never end the test.
        with pytest.raises(ServerFailed) as first:
            await asyncio.to_thread(connection.read_sync, "faults://state", 3600)
        # Its end seen as it happened, or by the read: either way with its exit status.
        assert "went away (exit status 3): resources/read faults://state: " in str(first.value)
        assert SAID_ON_STDERR in str(first.value)
        with pytest.raises(ServerFailed, match=r"server\.py` went away"):
            await asyncio.to_thread(connection.call_sync, "peek", {}, 3600)
        with pytest.raises(ServerFailed, match=r"server\.py` went away"):
            await connection.call("peek", {}, 3600)
    finally:
        await asyncio.to_thread(connection.close)


# -- 2. a large state ---------------------------------------------------------------------------
async def test_a_large_state_is_shown_capped_and_hashed_whole() -> None:
    """1.1 MB of state whose counter is at its end: the prompts carry the state capped like a
    tool result, and the guard still sees the counter move (`peek` twice runs twice: the state
    changed past the cap)."""
    outcome, rec = await _run("twice", 'mcp.snapshot=[{resource = "faults://big"}]')
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert [call.status for call in outcome.calls] == [CallStatus.EXECUTED] * 4
    hashes = [e.state_hash for e in rec.kinds("call_proposed")]
    assert hashes[0] != hashes[2]  # the two peeks, before and after the first bump
    # Whole, the state alone would be 275,000 tokens (a token_limit on the first call).
    assert max(e.prompt_tokens for e in rec.kinds("model_called")) < RESULT_CHAR_CAP


def test_the_prompts_show_the_state_capped_with_the_mark() -> None:
    state = {"state": [{"resource": "faults://big", "value": "x" * 1_100_000}]}
    shown = [
        react_messages("g", state)[1]["content"],
        planner_messages("g", state, [])[1]["content"],
    ]
    for content in shown:
        assert len(content) < RESULT_CHAR_CAP + 200
        assert TRUNCATION_MARK.split("{}")[0] in content
    small = {"state": [{"resource": "faults://state", "value": '{"count": 0}'}]}
    assert json.dumps(small, sort_keys=True) in react_messages("g", small)[1]["content"]


# -- 3. a snapshot entry that is not read-only --------------------------------------------------
@pytest.mark.parametrize(
    ("tool", "source"),
    [("erase", "server says it writes"), ("listing", "no annotation: treated as write")],
)
def test_a_snapshot_entry_that_is_not_read_only_refuses_the_run(tool: str, source: str) -> None:
    with pytest.raises(ScenarioError) as raised:
        _prepared("solve", f'mcp.snapshot=[{{resource = "faults://state"}}, {{tool = "{tool}"}}]')
    said = str(raised.value)
    assert f'snapshot entry 2 (tool = "{tool}") is not read-only ({source})' in said
    assert said.startswith(str(FAULTS / "scenario.toml"))
    assert _servers() == []


def test_a_snapshot_entry_naming_no_tool_of_the_server_refuses_the_run() -> None:
    with pytest.raises(ScenarioError, match=r'snapshot entry 1 \(tool = "nope"\).* no tool nope'):
        _prepared("solve", 'mcp.snapshot=[{tool = "nope"}]')


async def test_a_snapshot_tool_overridden_to_read_is_taken() -> None:
    outcome, _ = await _run(
        "solve", 'mcp.snapshot=[{tool = "listing"}]', "mcp.tools.listing.risk=read"
    )
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail


def test_the_cli_refuses_a_destructive_snapshot_entry_with_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopdeck", "run", str(FAULTS), "--script", "solve", "--headless",
         "--approve", "deny", "--db", str(tmp_path / "s.db"),
         "--set", 'mcp.snapshot=[{tool = "erase"}]'],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert 'snapshot entry 1 (tool = "erase") is not read-only' in done.stderr


# -- 4. what is not JSON-RPC --------------------------------------------------------------------
async def test_what_is_not_json_rpc_is_one_warning_naming_the_server(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    outcome, _ = await _run("stray")
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    tracebacks = [r for r in caplog.records if r.exc_info and r.name.startswith(("mcp", "client"))]
    assert tracebacks == []
    said = [r.getMessage() for r in caplog.records if r.name == "loopdeck.mcp"]
    named = f"MCP server `{sys.executable} {SERVER}`"
    assert said == [
        f"{named} wrote a line that is not JSON-RPC: this line is not json",
        f'{named} wrote a line that is not JSON-RPC: {{"hello": "a JSON object that is no'
        ' JSON-RPC message"}',
        f"{named} sent a malformed notification `notifications/progress`: params.progress:"
        " Field required; params.progressToken: Field required",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records if r.name == "loopdeck.mcp")


# -- a real server from npm ---------------------------------------------------------------------
MEMORY = "@modelcontextprotocol/server-memory"


def _memory_env(tmp_path: Path, snapshot: str) -> tuple[Path, Path]:
    graph = tmp_path / "memory.jsonl"
    graph.write_text(
        json.dumps({"type": "entity", "name": "release", "entityType": "note",
                    "observations": ["v1.1 shipped"]}) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    env = tmp_path / "memory_env"
    env.mkdir(exist_ok=True)
    (env / "scenario.toml").write_text(
        f"""name = "memory"
goal = "Keep the graph."
mode = "react"
goal_check = ["true"]
[mcp]
command = ["npx", "-y", "{MEMORY}"]
env = {{ MEMORY_FILE_PATH = "{graph}" }}
startup_timeout_s = 180
snapshot = [{snapshot}]
[scripts.look]
[[scripts.look.executor]]
tool = "read_graph"
[[scripts.look.executor]]
final = "looked"
""",
        encoding="utf-8",
    )
    return env, graph


def _cli(env: Path, db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopdeck", "run", str(env), "--script", "look", "--headless",
         "--json", "--approve", "deny", "--db", str(db)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
def test_server_memorys_destructive_tool_as_a_snapshot_entry_refuses_the_run(
    tmp_path: Path,
) -> None:
    delete = '{ tool = "delete_entities", args = { entityNames = ["release"] } }'
    env, graph = _memory_env(tmp_path, delete)
    refused = _cli(env, tmp_path / "s.db")
    assert refused.returncode == 2, refused.stderr
    said = 'snapshot entry 1 (tool = "delete_entities") is not read-only (server says it writes)'
    assert said in refused.stderr
    assert "v1.1 shipped" in graph.read_text(encoding="utf-8")  # nothing deleted, unasked
    env, graph = _memory_env(tmp_path, '{ tool = "read_graph" }')  # read-only: taken
    looked = _cli(env, tmp_path / "s.db")
    assert looked.returncode in (0, 1), looked.stderr
    assert "v1.1 shipped" in graph.read_text(encoding="utf-8")
