"""What stops a gateway run, and how the agent hears it: a budget's cap refuses the first call
past it in the agent's own format, naming the cap, and the run stops naming it (at most one
call past any cap reaches the upstream); the guard replaces a repeat from an unchanged folder
by text and the run stops `no_progress`; a stop answers the agent's next call with a final
message, even while the upstream holds the call, and a cap gives the agent its grace to exit
on its own; a kill refuses every call and ends the agent's process group, children included;
a pause holds the agent's next model call until it is resumed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from anthropic_loopback import AnthropicLoopback
from gateway_clients import Client, Refused
from gateway_helpers import (
    AGENT,
    Decider,
    GatewayRun,
    approve,
    door_command,
    door_of,
    door_run,
    until,
)
from loopback_server import Call, Text
from openai_loopback import USAGE_IN, USAGE_OUT, OpenAILoopback
from process_helpers import live_processes

from loopdeck.core.events import GuardTripped, OperatorCommand
from loopdeck.core.states import StopReason
from loopdeck.gateway.door import REFUSED_STATUS, Closing, Door, ModelCall
from loopdeck.gateway.server import FORMATS as FORMATS_BY_NAME

FORMATS = ("chat", "responses", "messages")
READ = Call("Read", {"file_path": "notes.md"}, text="Reading.")


@pytest.fixture(autouse=True)
def upstream_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-upstream-anthropic")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "notes.md").write_text("notes\n")
    return folder


def upstream_for(api: str, script: list[Any]) -> tuple[Any, str]:
    if api == "messages":
        return AnthropicLoopback(script), "anthropic/claude-loop"
    return OpenAILoopback(script), "openai/loop-model"


@pytest.mark.parametrize("api", FORMATS)
async def test_a_token_cap_refuses_the_call_past_it_naming_the_cap(
    api: str, tmp_path: Path, work: Path
) -> None:
    door_file = tmp_path / "door.json"
    loopback, model = upstream_for(api, [READ, READ, READ])
    per_call = USAGE_IN + USAGE_OUT  # each loopback answer's usage: 150
    with loopback as upstream:
        run = GatewayRun(work, door_command(door_file), model, upstream.url,
                         budget={"max_tokens": per_call + 50})  # fmt: skip
        async with door_run(run, door_file) as door:
            client = Client(door.told, api, stream=True)
            client.user("read")
            first = await client.ask()
            client.results({first.uses[0][0]: "notes\n"})
            with pytest.raises(Refused) as refused:
                await client.ask()  # its usage takes the run past the cap
        outcome = await run.outcome()
        asked = len(upstream.main_requests())
    assert refused.value.status == REFUSED_STATUS == 400  # not retried, printed as said
    assert "tokens budget exhausted: 300 of 200; the run has stopped" in refused.value.message
    assert asked == 2  # at most one call past the cap
    assert outcome.stop_reason is StopReason.TOKEN_LIMIT
    assert "tokens budget exhausted" in outcome.detail


async def test_a_turn_cap_refuses_the_next_call_before_it_goes_upstream(
    tmp_path: Path, work: Path
) -> None:
    door_file = tmp_path / "door.json"
    with OpenAILoopback([READ, READ]) as upstream:
        run = GatewayRun(work, door_command(door_file), "openai/loop-model", upstream.url,
                         budget={"max_turns": 1})  # fmt: skip
        async with door_run(run, door_file) as door:
            client = Client(door.told, "chat", stream=False)
            client.user("read")
            first = await client.ask()
            client.results({first.uses[0][0]: "notes\n"})
            with pytest.raises(Refused, match="turns budget exhausted: 1 of 1"):
                await client.ask()
        outcome = await run.outcome()
        assert len(upstream.main_requests()) == 1
    assert outcome.stop_reason is StopReason.TURN_LIMIT


async def test_a_tool_call_cap_refuses_the_answer_holding_the_use_past_it(
    tmp_path: Path, work: Path
) -> None:
    """Tool calls are the tool uses released: an answer whose tool use would pass the cap is
    refused whole, so the agent runs none of it."""
    door_file = tmp_path / "door.json"
    other = Call("Read", {"file_path": "other.md"})
    with OpenAILoopback([READ, other]) as upstream:
        run = GatewayRun(work, door_command(door_file), "openai/loop-model", upstream.url,
                         budget={"max_tool_calls": 1})  # fmt: skip
        async with door_run(run, door_file) as door:
            client = Client(door.told, "responses", stream=True)
            client.user("read")
            first = await client.ask()
            client.results({first.uses[0][0]: "notes\n"})
            with pytest.raises(Refused, match="tool_calls budget exhausted: 1 of 1"):
                await client.ask()
        outcome = await run.outcome()
    assert outcome.stop_reason is StopReason.TOOL_CALL_LIMIT and outcome.tool_calls == 1


@pytest.mark.parametrize("api", FORMATS)
async def test_a_closed_door_answers_every_call_itself(api: str) -> None:
    """Once its run stops, the door answers each call without it: a stop's final message (a
    text answer in the agent's format, with no tool use), or a refusal naming why."""
    chosen = FORMATS_BY_NAME[api]
    door = Door("loop-model")
    waiting = ModelCall(chosen, {}, stream=True)
    door.submit(waiting)
    door.close(Closing("loopdeck: stopped. Stop now.", final=True))
    answer = waiting.answered.result().answer
    assert answer is not None and chosen.tool_uses(answer) == []
    assert chosen.said(answer) == "loopdeck: stopped. Stop now."
    assert b"Stop now." in b"".join(chosen.frames(answer))
    door.close(Closing("loopdeck: killed by test"))
    later = ModelCall(chosen, {}, stream=False)
    door.submit(later)
    refused = later.answered.result()
    assert (refused.status, refused.kind, refused.message) == (
        400, "loopdeck_refused", "loopdeck: killed by test")  # fmt: skip
    assert "killed by test" in str(chosen.error(400, refused.kind, refused.message))


@pytest.mark.parametrize("api", FORMATS)
async def test_a_repeated_read_from_one_state_is_replaced_and_stops_the_run(
    api: str, tmp_path: Path, work: Path
) -> None:
    door_file = tmp_path / "door.json"
    loopback, model = upstream_for(api, [READ, READ, READ])
    with loopback as upstream:
        run = GatewayRun(work, door_command(door_file), model, upstream.url)
        async with door_run(run, door_file) as door:
            client = Client(door.told, api, stream=False)
            client.user("read")
            first = await client.ask()
            assert [tool for _, tool, _ in first.uses] == ["Read"]
            client.results({first.uses[0][0]: "notes\n"})
            second = await client.ask()  # the same read, nothing changed in between
            assert second.uses == []
            assert "Read: notes.md repeats a call made from this same state" in second.text
            final = await client.ask()  # the run has stopped: told to end
            assert final.uses == [] and "Stop now" in final.text
        outcome = await run.outcome()
        assert len(upstream.main_requests()) == 2
    [tripped] = run.events(GuardTripped)
    assert tripped.call_id == "c2"
    assert outcome.stop_reason is StopReason.NO_PROGRESS
    assert [c.status.value for c in outcome.calls] == ["executed", "blocked_repeat"]


async def test_a_stop_answers_the_held_call_with_a_final_message(
    tmp_path: Path, work: Path
) -> None:
    door_file = tmp_path / "door.json"
    write = Call("Write", {"file_path": "a.txt", "content": "a\n"})
    decider = Decider()
    with AnthropicLoopback([write]) as upstream:
        run = GatewayRun(work, door_command(door_file), "anthropic/claude-loop", upstream.url,
                         approver=decider)  # fmt: skip
        async with door_run(run, door_file) as door:
            client = Client(door.told, "messages", stream=True)
            client.user("write")
            asking = asyncio.ensure_future(client.ask())
            await until("the write held", lambda: "c1" in decider.waiting)
            run.runtime.cancel(by="test")
            answer = await asking
        outcome = await run.outcome()
    assert answer.uses == [] and "the run has stopped (cancelled" in answer.text
    assert "Stop now" in answer.text
    assert outcome.stop_reason is StopReason.CANCELLED
    assert not (work / "a.txt").exists()


async def test_a_kill_refuses_the_held_call_and_leaves_no_agent_process(
    tmp_path: Path, work: Path
) -> None:
    """The agent (its own process, on raw HTTP) ran a command that left a child behind, then
    waits on a held write: a kill refuses that call and ends the agent and its child."""
    marker = f"kill-{tmp_path.name}"
    child = "sleep 6017"
    bash = Call("Bash", {"command": f"{child} > /dev/null 2>&1 &"})
    write = Call("Write", {"file_path": "a.txt", "content": "a\n"})
    decider = Decider(lambda r: approve(r) if r.tool == "Bash" else None)
    log = tmp_path / "agent.log"
    with AnthropicLoopback([bash, write]) as upstream:
        command = [sys.executable, AGENT, "messages", "stream", marker]
        run = GatewayRun(work, command, "anthropic/claude-loop", upstream.url, approver=decider,
                         env={"GATEWAY_AGENT_LOG": str(log)})  # fmt: skip
        run.start()
        await until("the write held", lambda: "c2" in decider.waiting)
        assert live_processes(child) and live_processes(marker)
        run.runtime.kill(by="test")
        outcome = await run.outcome()
    assert outcome.stop_reason is StopReason.KILLED
    assert live_processes(child) == [] and live_processes(marker) == []
    assert not (work / "a.txt").exists()


async def test_a_stop_while_the_upstream_holds_the_call_answers_it_with_a_final_message(
    tmp_path: Path, work: Path
) -> None:
    """The model never answers: a stop does not wait for it (nor for the deadline), the
    agent's call is answered with the final message and the run stops `cancelled`."""
    door_file = tmp_path / "door.json"
    loopback = OpenAILoopback([READ])
    loopback.hang = True
    with loopback as upstream:
        run = GatewayRun(work, door_command(door_file), "openai/loop-model", upstream.url)
        async with door_run(run, door_file) as door:
            client = Client(door.told, "chat", stream=True)
            client.user("read")
            asking = asyncio.ensure_future(client.ask())
            await until("the call held upstream", upstream.hanging.is_set)
            run.runtime.cancel(by="test")
            answer = await asking
        outcome = await run.outcome()
    assert answer.uses == [] and "the run has stopped (cancelled" in answer.text
    assert outcome.stop_reason is StopReason.CANCELLED


async def test_a_cap_gives_the_agent_its_grace_to_exit_on_its_own(
    tmp_path: Path, work: Path
) -> None:
    """Refused at a cap, the agent is not ended at once (a kill is): it has its grace to show
    the refusal and exit, as Claude Code prints it and exits. Its own status says it did."""
    door_file = tmp_path / "door.json"
    with OpenAILoopback([READ, READ]) as upstream:
        run = GatewayRun(work, door_command(door_file), "openai/loop-model", upstream.url,
                         budget={"max_turns": 1})  # fmt: skip
        run.start()
        door = await door_of(door_file)
        client = Client(door.told, "chat", stream=False)
        client.user("read")
        first = await client.ask()
        client.results({first.uses[0][0]: "notes\n"})
        with pytest.raises(Refused, match="turns budget exhausted: 1 of 1"):
            await client.ask()
        door.end(7)  # the agent exits once it has shown the refusal
        outcome = await run.outcome()
    assert outcome.stop_reason is StopReason.TURN_LIMIT
    # Its own exit, not loopdeck's SIGTERM (the guardian's 128 + 15), which a kill sends at once.
    assert run.runtime.agent.agent.proc.returncode == 7


async def test_a_pause_holds_the_agents_next_model_call_until_resumed(
    tmp_path: Path, work: Path
) -> None:
    door_file = tmp_path / "door.json"
    with OpenAILoopback([READ, Text("Done.")]) as upstream:
        run = GatewayRun(work, door_command(door_file), "openai/loop-model", upstream.url)
        async with door_run(run, door_file) as door:
            client = Client(door.told, "chat", stream=True)
            client.user("read")
            run.runtime.pause(by="test")
            asking = asyncio.ensure_future(client.ask())
            await until("the call held by the pause", lambda: run.runtime.ledger.held == "paused")
            assert upstream.main_requests() == [] and not asking.done()
            # held a millisecond at least: the outcome says its wait to the millisecond (a
            # resume within half of one, as a loaded CI once had it, said 0.0)
            await until("a held millisecond", lambda: run.runtime.ledger.operator_s() >= 0.001)
            run.runtime.resume(by="test")
            first = await asking
            assert [tool for _, tool, _ in first.uses] == ["Read"]
            assert len(upstream.main_requests()) == 1
        outcome = await run.outcome()
    assert [(e.command, e.by) for e in run.events(OperatorCommand)] == [
        ("pause", "test"), ("resume", "test")]  # fmt: skip
    assert outcome.operator_wait_s > 0
