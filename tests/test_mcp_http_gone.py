"""An MCP server over HTTP (`[mcp] url`) that dies while the run waits for something else (an
approval) stops the run at once, `tool_failure`, in the words a dead stdio server gives ("MCP
server `…` went away: …"), its pending write withdrawn: loopdeck pings it every
`ping_interval_s`, so its end is not found only at the next request, which may never come.
The server is the notes_mcp sample's over streamable HTTP, killed with SIGKILL."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Recorder

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import CallStatus, EventBus
from loopdeck.core.states import StopReason
from loopdeck.mcp_env.config import McpConfig
from loopdeck.operator.launch import RunOptions, prepare_run

SAMPLE = Path(__file__).resolve().parents[1] / "sample_envs" / "notes_mcp"
BOUND_S = 120.0  # a loaded 2-core machine's; the run ends within a second or two when idle


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """The sample's server over streamable HTTP, listening, its notes in a folder of its own."""
    folder = tmp_path / "served"
    folder.mkdir()
    (folder / "notes.json").write_text('{"draft": "x", "release": "v1.1 shipped"}')
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, str(SAMPLE / "server.py"), "--http", str(port)],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(2400):  # a loaded machine: up to two minutes
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, "the MCP server exited before it listened"
            time.sleep(0.05)
        yield server, port
    finally:
        server.kill()
        server.wait(30)


def _env_over_http(env: Path, port: int, ping_s: float) -> Path:
    env.mkdir()
    scenario = (SAMPLE / "scenario.toml").read_text(encoding="utf-8")
    scenario = scenario.replace(
        'command = ["{python}", "{envdir}/server.py"]',
        f'url = "http://127.0.0.1:{port}/mcp"\nping_interval_s = {ping_s}',
    ).replace('"{envdir}/check_goal.py"', f'"{SAMPLE / "check_goal.py"}"')
    (env / "scenario.toml").write_text(scenario, encoding="utf-8")
    return env


class _KillsTheServerAndNeverDecides:
    """Kills the server as the first write is asked for, then waits for ever: only the
    server's end, seen by loopdeck, can end the run."""

    def __init__(self, server: subprocess.Popen[bytes]) -> None:
        self.server = server
        self.asked: list[str] = []

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request.call_id)
        self.server.kill()
        await asyncio.Event().wait()
        raise AssertionError("never decided")


async def test_a_server_over_http_killed_while_a_write_waits_stops_the_run_at_once(
    tmp_path: Path, served: tuple[subprocess.Popen[bytes], int]
) -> None:
    server, port = served
    url = f"http://127.0.0.1:{port}/mcp"
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    approver = _KillsTheServerAndNeverDecides(server)
    env = _env_over_http(tmp_path / "env", port, 0.2)
    options = RunOptions(env=str(env), script="solve", approve="auto")
    prepared = prepare_run(options, approver=approver, bus=bus)
    try:
        outcome = await asyncio.wait_for(prepared.runtime.run(), BOUND_S)
    finally:
        prepared.cleanup()
    [write] = approver.asked
    assert outcome.stop_reason is StopReason.TOOL_FAILURE, outcome.detail
    assert outcome.detail.startswith(f"MCP server `{url}` went away: "), outcome.detail
    statuses = {call.call_id: call.status for call in outcome.calls}
    assert statuses[write] is CallStatus.WITHDRAWN
    assert [e.call_id for e in recorder.kinds("approval_withdrawn")] == [write]


def test_the_ping_interval_is_the_scenarios_to_set() -> None:
    url = "http://127.0.0.1:1/mcp"
    assert McpConfig(url=url).ping_interval_s > 0  # pinged unless the scenario says not
    assert McpConfig(url=url, ping_interval_s=0).ping_interval_s == 0  # never pinged
    with pytest.raises(ValueError, match="ping_interval_s"):
        McpConfig(url=url, ping_interval_s=-1)


async def test_a_ping_waits_as_long_as_the_runs_slowest_call_may_take(tmp_path: Path) -> None:
    """A server may answer nothing while it works on a call (a tool that blocks its loop):
    a ping is given the longest timeout the scenario sets, not only `call_timeout_s`, so a
    tool given more is not cut off as the server found gone mid-call."""
    import anyio
    from mcp.shared.exceptions import MCPError

    from loopdeck.mcp_env.connection import McpConnection

    config = McpConfig(url="http://127.0.0.1:1/mcp", call_timeout_s=5, ping_interval_s=0.001,
                       tools={"slow_export": {"timeout_s": 600}})  # fmt: skip
    connection = McpConnection(config, tmp_path, tmp_path / "err.log")
    given: list[float] = []

    class Session:
        async def send_ping(self) -> None:
            given.append(anyio.current_effective_deadline() - anyio.current_time())
            raise MCPError(-32600, "session gone")  # ends the pings

    await connection._pinged(Session())
    assert len(given) == 1 and given[0] > 590, given
    assert connection.gone == "a ping answered error -32600: session gone"
