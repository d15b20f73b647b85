"""A streamed answer holding a write waits for the operator with its connection kept alive: the
format's keep-alive (Anthropic's `ping` event, an SSE comment for OpenAI's formats) every
`keepalive_s` for as long as the approval waits, here ten minutes of a fake clock; then the
decided answer, whole, on the same stream."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from anthropic_loopback import AnthropicLoopback
from gateway_agent import TOOLS, streamed_message
from gateway_helpers import Decider, GatewayRun, door_command, door_run, until
from loopback_server import Call
from openai_loopback import OpenAILoopback

from loopdeck.core.events import ApprovalWithdrawn, CallStatus, ToolFinished
from loopdeck.core.states import StopReason
from loopdeck.gateway import server
from loopdeck.gateway.config import KEEPALIVE_S

TEN_MINUTES = 600.0
WRITE = Call("Write", {"file_path": "a.txt", "content": "a\n"})


class FakeClock(server.Clock):
    """Each keep-alive interval passes at once, up to `until_s`; then the wait is real."""

    def __init__(self, until_s: float) -> None:
        self.now = 0.0
        self.until_s = until_s

    async def wait(self, done: asyncio.Future[Any], timeout_s: float) -> bool:
        if not done.done() and self.now + timeout_s <= self.until_s:
            await asyncio.sleep(0)
            self.now += timeout_s
            return done.done()
        await asyncio.wait({done})
        return True


@pytest.fixture(autouse=True)
def upstream_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-upstream-anthropic")


def request_for(api: str, told: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    """A streamed first call, raw: its URL, headers and body."""
    tools = [{"name": n, "input_schema": s} for n, s in TOOLS.items()]
    if api == "messages":
        headers = {"x-api-key": told["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"}
        body = {"model": "m", "max_tokens": 100, "stream": True, "tools": tools,
                "messages": [{"role": "user", "content": "write"}]}  # fmt: skip
        return told["ANTHROPIC_BASE_URL"] + "/v1/messages", headers, body
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "write"}],
            "tools": [{"type": "function", "function": {"name": t["name"],
                       "parameters": t["input_schema"]}} for t in tools]}  # fmt: skip
    headers = {"authorization": f"Bearer {told['OPENAI_API_KEY']}"}
    return told["OPENAI_BASE_URL"] + "/chat/completions", headers, body


async def streamed(url: str, headers: dict[str, str], body: dict[str, Any]) -> list[str]:
    async with (
        httpx.AsyncClient(timeout=None) as client,
        client.stream("POST", url, json=body, headers=headers) as reply,
    ):
        assert reply.status_code == 200
        return [line async for line in reply.aiter_lines()]


@pytest.mark.parametrize("api", ["messages", "chat"])
async def test_a_held_stream_is_kept_alive_for_ten_minutes_then_answered(
    api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(TEN_MINUTES)
    monkeypatch.setattr(server, "CLOCK", clock)
    work = tmp_path / "work"
    work.mkdir()
    door_file = tmp_path / "door.json"
    decider = Decider()
    loopback = AnthropicLoopback([WRITE]) if api == "messages" else OpenAILoopback([WRITE])
    model = "anthropic/claude-loop" if api == "messages" else "openai/loop-model"
    with loopback as upstream:
        run = GatewayRun(work, door_command(door_file), model, upstream.url, approver=decider)
        async with door_run(run, door_file) as door:
            reading = asyncio.ensure_future(streamed(*request_for(api, door.told)))
            await until("the write held", lambda: "c1" in decider.waiting)
            await until("ten minutes passed", lambda: clock.now >= TEN_MINUTES)
            assert not reading.done()  # still held, the stream still open
            decider.answer("c1", approved=True, by="test")
            lines = await reading
        await run.outcome()
    kept = [line for line in lines if line in ("event: ping", ": keep-alive")]
    assert len(kept) == TEN_MINUTES / KEEPALIVE_S  # one every interval while it was held
    if api == "messages":
        message = streamed_message(iter(lines))
        [use] = [b for b in message["content"] if b["type"] == "tool_use"]
        assert (use["name"], use["input"]) == ("Write", {"file_path": "a.txt", "content": "a\n"})
        return
    chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    [call] = [c for chunk in chunks for c in chunk["choices"][0]["delta"].get("tool_calls", [])]
    assert call["function"]["name"] == "Write"
    assert json.loads(call["function"]["arguments"]) == {"file_path": "a.txt", "content": "a\n"}
    assert [line for line in lines if line][-1] == "data: [DONE]"


async def left(
    url: str, headers: dict[str, str], body: dict[str, Any], held: Callable[[], Any]
) -> None:
    """A streamed call sent raw, its connection closed with nothing read once `held()` is
    true: an agent that died while its call was held."""
    where = httpx.URL(url)
    _, writer = await asyncio.open_connection(where.host, where.port)
    data = json.dumps(body).encode()
    head = [f"POST {where.raw_path.decode()} HTTP/1.1", f"Host: {where.host}:{where.port}",
            "Content-Type: application/json", f"Content-Length: {len(data)}",
            *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
    writer.write("\r\n".join([*head, "", ""]).encode() + data)
    await writer.drain()
    await until("the call held", held)
    writer.close()
    await writer.wait_closed()


@pytest.mark.parametrize("kept_alive", [False, True])
async def test_an_agent_gone_while_its_stream_is_held_leaves_no_traceback(
    kept_alive: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The agent's connection closes while its write waits (before any keep-alive, or after
    some): the approval is withdrawn and the write recorded as not delivered; the gateway
    writes nothing to the closed connection and logs no error for it; the agent then exits
    and the run ends as any run whose agent exited."""
    if kept_alive:
        monkeypatch.setattr(server, "CLOCK", FakeClock(3 * KEEPALIVE_S))
    work = tmp_path / "work"
    work.mkdir()
    door_file = tmp_path / "door.json"
    decider = Decider()
    with caplog.at_level(logging.WARNING), AnthropicLoopback([WRITE]) as upstream:
        run = GatewayRun(work, door_command(door_file), "anthropic/claude-loop", upstream.url,
                         approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            await left(*request_for("messages", door.told), lambda: "c1" in decider.waiting)
            served = run.runtime.agent.server._runner.server  # aiohttp's `Server`
            gone = lambda: all(h.transport is None for h in served.connections)  # noqa: E731
            await until("the gateway saw the connection close", gone)
            await until("the approval withdrawn", lambda: run.events(ApprovalWithdrawn))
            door.end(0)
            outcome = await run.outcome()  # the gateway's server stopped: every handler done
    assert outcome.stop_reason is not StopReason.TOOL_FAILURE, outcome.detail
    [finished] = run.events(ToolFinished)
    assert finished.status is CallStatus.WITHDRAWN and "not delivered" in str(finished.result)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("aiohttp")] == []
