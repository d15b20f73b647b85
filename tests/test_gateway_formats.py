"""`loopdeck gateway` in each of the three formats agents speak (OpenAI Chat Completions, OpenAI
Responses, Anthropic Messages), streamed and not: an agent (`gateway_agent.py`, on the official
`openai` SDK, or raw HTTP for Anthropic) works through the gateway against a loopback upstream
that checks every request body as the provider would; the answers it gets parse, its write is
recorded with its result, its spend counted (a price LiteLLM does not know: unknown, not 0),
and the goal check decides once it exits. The agent never holds the upstream's key."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from anthropic_loopback import AnthropicLoopback
from gateway_clients import Answer, Client
from gateway_helpers import AGENT, GatewayRun, check_for, door_command, door_run
from loopback_server import Call, Text
from openai_loopback import SIDE_TEXT, USAGE_IN, USAGE_OUT, OpenAILoopback

from loopdeck.core.events import CallProposed, ModelCalled, ToolFinished
from loopdeck.core.states import StopReason

FORMATS = ("chat", "responses", "messages")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The folder the agent works in (the test's other files stay beside it)."""
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.fixture(autouse=True)
def upstream_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The upstream's keys, in loopdeck's environment only."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-upstream-anthropic")
    monkeypatch.setenv("GEMINI_API_KEY", "sk-upstream-gemini")


def upstream_for(api: str, script: list[Any]) -> tuple[Any, str]:
    """A loopback upstream for `api`, and the LiteLLM model name that reaches it."""
    if api == "messages":
        return AnthropicLoopback(script), "anthropic/claude-loop"
    return OpenAILoopback(script), "openai/loop-model"


WRITE = Call("Write", {"file_path": "done.txt", "content": "done\n"}, text="Writing it.")


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("api", FORMATS)
async def test_each_format_streamed_and_whole_through_its_official_client(
    api: str, stream: bool, tmp_path: Path, work: Path
) -> None:
    """The test is the agent: its client gets the write, runs it, sends its result."""
    door_file = tmp_path / "door.json"
    loopback, model = upstream_for(api, [WRITE, Text("All done.")])
    with loopback as upstream:
        run = GatewayRun(work, door_command(door_file), model, upstream.url,
                         check=check_for("done.txt"))  # fmt: skip
        async with door_run(run, door_file) as door:
            client = Client(door.told, api, stream)
            client.user("write done.txt")
            first = await client.ask()
            assert first.text == "Writing it."
            [(use_id, tool, given)] = first.uses
            assert (tool, given) == ("Write", {"file_path": "done.txt", "content": "done\n"})
            (work / "done.txt").write_text("done\n")  # the agent runs it
            client.results({use_id: "wrote done.txt"})
            assert await client.ask() == Answer("All done.", [])
        outcome = await run.outcome()
        assert upstream.problems() == []
        main = upstream.main_requests()
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert len(main) == 2 and all(not seen.body.get("stream") for seen in main)  # asked whole
    _recorded(run, outcome)


def _recorded(run: GatewayRun, outcome: Any) -> None:
    """The write proposed with where its risk came from, its result recorded, the turns and
    their tokens counted, their cost unknown (LiteLLM has no price for the loopback)."""
    [proposed] = run.events(CallProposed)
    assert proposed.tool == "Write: done.txt" and proposed.risk == "write"
    assert "Claude Code's Write" in proposed.risk_source
    [finished] = run.events(ToolFinished)
    assert finished.call_id == proposed.call_id
    assert finished.result == {"ok": True, "data": {"output": "wrote done.txt"}}
    turns = run.events(ModelCalled)
    assert [t.content for t in turns] == ["Writing it.", "All done."]
    assert [(t.prompt_tokens, t.completion_tokens) for t in turns] == [(USAGE_IN, USAGE_OUT)] * 2
    assert outcome.model_calls == 2 and outcome.tool_calls == 1
    assert outcome.tokens == 2 * (USAGE_IN + USAGE_OUT)
    assert outcome.cost_usd is None and outcome.cost_unknown_calls == 2
    assert (
        outcome.env == "gateway:gateway_agent"
        and outcome.model == f"gateway gateway_agent ({run.model})"
    )


@pytest.mark.parametrize(
    "api", [pytest.param("chat", marks=pytest.mark.slow),
            pytest.param("responses", marks=pytest.mark.slow), "messages"],
)  # fmt: skip
async def test_an_agent_process_works_through_the_gateway_until_it_exits(
    api: str, tmp_path: Path, work: Path
) -> None:
    """The agent's own process (the `openai` SDK's streams; raw HTTP for Anthropic): it runs
    the write it is given, and the goal check decides once it exits."""
    log = tmp_path / "agent.log"
    loopback, model = upstream_for(api, [WRITE, Text("All done.")])
    with loopback as upstream:
        command = [sys.executable, AGENT, api, "stream", "write done.txt"]
        run = GatewayRun(work, command, model, upstream.url, check=check_for("done.txt"),
                         env={"GATEWAY_AGENT_LOG": str(log)})  # fmt: skip
        run.start()
        outcome = await run.outcome()
        assert upstream.problems() == []
    assert not log.exists(), log.read_text()
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert (work / "done.txt").read_text() == "done\n"
    _recorded(run, outcome)


async def test_the_agent_gets_the_gateway_and_a_run_token_never_the_upstreams_key(
    tmp_path: Path, work: Path
) -> None:
    door_file = tmp_path / "door.json"
    with OpenAILoopback([]) as upstream:
        run = GatewayRun(work, door_command(door_file), "openai/loop-model", upstream.url)
        async with door_run(run, door_file) as door:
            told = door.told
            token = told["OPENAI_API_KEY"]
            assert token.startswith("ldg-") and "upstream" not in token
            assert told["ANTHROPIC_API_KEY"] == told["ANTHROPIC_AUTH_TOKEN"] == token
            assert told["OPENAI_BASE_URL"] == told["ANTHROPIC_BASE_URL"] + "/v1"
            assert told["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
            assert "GEMINI_API_KEY" not in told["environ"]  # no credential of loopdeck's
            reply = await door.openai().chat.completions.create(
                model="any", messages=[{"role": "user", "content": "hi"}]
            )
            assert reply.choices[0].message.content == SIDE_TEXT  # a request without tools
            # Only the run's token is let in.
            from openai import AsyncOpenAI, AuthenticationError

            stranger = AsyncOpenAI(base_url=told["OPENAI_BASE_URL"], api_key="sk-upstream-openai")
            with pytest.raises(AuthenticationError):
                await stranger.chat.completions.create(model="any", messages=[])
        await run.outcome()
        assert upstream.seen[0].headers.get("authorization") == "Bearer sk-upstream-openai"
