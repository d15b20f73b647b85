"""What the gateway does when the other side goes away: an agent whose client timed out while
its write was held (the approval withdrawn, the write recorded as not delivered, the client's
retry put to the operator as a new call, not as a repeat); a run stopped while its model call
is upstream (a model call whose tokens and cost are unknown, never 0)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from gateway_clients import Client
from gateway_helpers import Decider, GatewayRun, door_command, door_run, until
from loopback_server import Call, Text
from openai_loopback import OpenAILoopback

from loopdeck.core.events import (
    ApprovalWithdrawn,
    CallStatus,
    GuardTripped,
    ModelCalled,
    ToolFinished,
)
from loopdeck.core.states import StopReason

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
