"""What the gateway does when the other side goes away: an agent whose client timed out while
its write was held (the approval withdrawn, the write recorded as not delivered, the client's
retry put to the operator as a new call, not as a repeat); one whose connection closed once
its answer was decided, before the answer reached it (the write it released recorded as not
delivered, said, and the retry a new call); a run stopped while its model call is upstream (a
model call whose tokens and cost are unknown, never 0)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_clients import Client
from gateway_helpers import Decider, GatewayRun, door_command, door_run, until
from loopback_server import Call, Text
from openai_loopback import OpenAILoopback

from loopdeck.core.budgets import Cap
from loopdeck.core.events import (
    ApprovalWithdrawn,
    BudgetUpdated,
    CallStatus,
    Finding,
    GuardTripped,
    ModelCalled,
    ToolFinished,
)
from loopdeck.core.states import StopReason
from loopdeck.gateway import server

MODEL = "openai/loop-model"
WRITE = Call("Write", {"file_path": "done.txt", "content": "done\n"}, text="Writing.")


@pytest.fixture(autouse=True)
def upstream_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-openai")


async def test_a_client_that_timed_out_while_its_write_was_held_gets_nothing_delivered(
    tmp_path: Path,
) -> None:
    """A whole (not streamed) call's client gives up while the write waits: the gateway sees
    the connection close, withdraws the approval and records the write as not delivered;
    the client's retry of the same request is a new call for the operator, not a repeat."""
    from openai import APITimeoutError, AsyncOpenAI

    work = tmp_path / "work"
    work.mkdir()
    door_file = tmp_path / "door.json"
    decider = Decider()
    with OpenAILoopback([WRITE, Text("Done.")]) as upstream:
        run = GatewayRun(work, door_command(door_file), MODEL, upstream.url, approver=decider,
                         check=["sh", "-c", "test -f done.txt"])  # fmt: skip
        async with door_run(run, door_file) as door:
            hasty = AsyncOpenAI(base_url=door.told["OPENAI_BASE_URL"],
                                api_key=door.told["OPENAI_API_KEY"], max_retries=0,
                                timeout=1.0)  # fmt: skip
            asked = {"model": "m", "messages": [{"role": "user", "content": "write done.txt"}],
                     "tools": [{"type": "function", "function": {"name": "Write"}}]}  # fmt: skip
            with pytest.raises(APITimeoutError):
                await hasty.chat.completions.create(**asked)  # type: ignore[call-overload]
            await until("the approval withdrawn", lambda: run.events(ApprovalWithdrawn))
            assert "c1" not in decider.waiting or decider.waiting["c1"].cancelled()
            client = Client(door.told, "chat", stream=False)
            client.user("write done.txt")
            retried = asyncio.ensure_future(client.ask())  # the SDK's retry, the same request
            await until("the retry's write held", lambda: "c2" in decider.waiting)
            decider.answer("c2", approved=True, by="test")
            answer = await retried
            [(use_id, _, _)] = answer.uses
            (work / "done.txt").write_text("done\n")
            client.results({use_id: "wrote done.txt"})
            assert (await client.ask()).text == "Done."
        outcome = await run.outcome()
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert run.events(GuardTripped) == []
    finished = {f.call_id: f for f in run.events(ToolFinished)}
    assert finished["c1"].status is CallStatus.WITHDRAWN
    assert "not delivered" in str(finished["c1"].result)
    assert finished["c2"].status is CallStatus.EXECUTED
    assert [w.call_id for w in run.events(ApprovalWithdrawn)] == ["c1"]


class LateClock(server.Clock):
    """A held stream's wait that ends only when its handler is cancelled, once its answer is
    settled: the agent's connection can close between the answer decided and written."""

    def __init__(self) -> None:
        self.settled = asyncio.Event()

    async def wait(self, done: asyncio.Future[Any], timeout_s: float) -> bool:
        await asyncio.wait({done})
        self.settled.set()
        await asyncio.Event().wait()  # until aiohttp cancels the handler
        return True


async def test_an_answer_decided_for_a_connection_that_closed_is_not_delivered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write is approved and the answer settled, and the agent's connection closes before
    the answer is written: the write is recorded as not delivered (it never reached the
    agent) and the run says so; the client's retry of the same request is a new call put to
    the operator, not a repeat, and the withdrawn write, which never ran, does not count
    toward the tool-call cap (at 1, the retry is still released)."""
    clock = LateClock()
    monkeypatch.setattr(server, "CLOCK", clock)
    work = tmp_path / "work"
    work.mkdir()
    door_file = tmp_path / "door.json"
    decider = Decider()
    with OpenAILoopback([WRITE, Text("Done.")]) as upstream:
        run = GatewayRun(work, door_command(door_file), MODEL, upstream.url, approver=decider,
                         check=["sh", "-c", "test -f done.txt"],
                         budget={"max_tool_calls": 1})  # fmt: skip
        async with door_run(run, door_file) as door:
            url = door.told["OPENAI_BASE_URL"] + "/chat/completions"
            headers = {"authorization": f"Bearer {door.told['OPENAI_API_KEY']}"}
            body = {"model": "m", "stream": True,
                    "messages": [{"role": "user", "content": "write done.txt"}],
                    "tools": [{"type": "function", "function": {"name": "Write"}}]}  # fmt: skip
            writer = await _sent_raw(url, headers, body)
            await until("the write held", lambda: "c1" in decider.waiting)
            decider.answer("c1", approved=True, by="test")
            await until("the answer settled", clock.settled.is_set)
            writer.close()  # the agent's client gives up before the answer is written
            await writer.wait_closed()
            await until("c1 recorded not delivered", lambda: run.events(ToolFinished))
            client = Client(door.told, "chat", stream=False)
            client.user("write done.txt")
            retried = asyncio.ensure_future(client.ask())  # the client's retry
            await until("the retry's write held", lambda: "c2" in decider.waiting)
            decider.answer("c2", approved=True, by="test")
            [(use_id, _, _)] = (await retried).uses
            (work / "done.txt").write_text("done\n")
            client.results({use_id: "wrote done.txt"})
            assert (await client.ask()).text == "Done."
        outcome = await run.outcome()
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert run.events(GuardTripped) == []
    finished = {f.call_id: f for f in run.events(ToolFinished)}
    assert finished["c1"].status is CallStatus.WITHDRAWN
    assert "not delivered" in str(finished["c1"].result)
    assert finished["c2"].status is CallStatus.EXECUTED
    [lost] = [f.text for f in run.events(Finding) if "not delivered" in f.text]
    assert "c1 withdrawn" in lost
    assert outcome.tool_calls == 1
    assert run.events(BudgetUpdated)[-1].caps()[Cap.TOOL_CALLS].used == 1


async def _sent_raw(
    url: str, headers: dict[str, str], body: dict[str, Any]
) -> asyncio.StreamWriter:
    """A request sent on a connection of its own, nothing read: the writer closes it."""
    where = httpx.URL(url)
    _, writer = await asyncio.open_connection(where.host, where.port)
    data = json.dumps(body).encode()
    head = [f"POST {where.raw_path.decode()} HTTP/1.1", f"Host: {where.host}:{where.port}",
            "Content-Type: application/json", f"Content-Length: {len(data)}",
            *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
    writer.write("\r\n".join([*head, "", ""]).encode() + data)
    await writer.drain()
    return writer


async def test_a_call_stopped_while_upstream_spent_an_unknown_amount(tmp_path: Path) -> None:
    """The run is cancelled while the model has not answered: the call went upstream, so it
    is a model call, its tokens and cost unknown (never 0)."""
    work = tmp_path / "work"
    work.mkdir()
    door_file = tmp_path / "door.json"
    loopback = OpenAILoopback([WRITE])
    loopback.hang = True
    with loopback as upstream:
        run = GatewayRun(work, door_command(door_file), MODEL, upstream.url)
        async with door_run(run, door_file) as door:
            client = Client(door.told, "chat", stream=False)
            client.user("write")
            asking = asyncio.ensure_future(client.ask())
            await until("the call held upstream", upstream.hanging.is_set)
            run.runtime.cancel(by="test")
            await asking
        outcome = await run.outcome()
    assert outcome.stop_reason is StopReason.CANCELLED
    [turn] = run.events(ModelCalled)
    assert turn.tokens_unknown and turn.cost_usd is None
    assert outcome.model_calls == 1 and outcome.cost_usd is None
    assert outcome.cost_unknown_calls == 1
