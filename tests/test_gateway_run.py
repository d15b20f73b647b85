"""A gateway run as a run like any other: `loopdeck gateway`'s words checked before anything
starts, a `[gateway]` env folder (its tools' risks said in scenario.toml), a change of the folder
no released write explains (`unrequested_change`), an agent that exits while its call is held,
and the goal nothing checks."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
from anthropic_loopback import AnthropicLoopback
from conftest import Recorder
from gateway_clients import Client
from gateway_helpers import AGENT, Decider, GatewayRun, door_command, door_run, until
from loopback_server import Call, Text

from loopdeck.core.approvals import DenyApprover
from loopdeck.core.events import CallProposed, EventBus, UnrequestedChange
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run

READ = Call("Read", {"file_path": "notes.md"}, text="Reading.")
MODEL = "anthropic/claude-loop"


@pytest.fixture(autouse=True)
def upstream_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-upstream-anthropic")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "notes.md").write_text("notes\n")
    return folder


@pytest.mark.parametrize("approve", ["auto", "deny"])
async def test_a_change_no_released_write_explains_is_unrequested(
    approve: str, tmp_path: Path, work: Path
) -> None:
    """The agent was given a read and wrote a file as well: named; a guarded run stops."""
    door_file = tmp_path / "door.json"
    with AnthropicLoopback([READ, Text("Done.")]) as upstream:
        run = GatewayRun(work, door_command(door_file), MODEL, upstream.url, approve=approve)
        async with door_run(run, door_file) as door:
            client = Client(door.told, "messages", stream=False)
            client.user("read")
            first = await client.ask()
            (work / "sneaky.txt").write_text("nobody asked\n")
            client.results({first.uses[0][0]: "notes\n"})
            if approve == "auto":
                assert (await client.ask()).text == "Done."
            else:
                final = await client.ask()
                assert "policy_block" in final.text and final.uses == []
        outcome = await run.outcome()
    [change] = run.events(UnrequestedChange)
    assert change.added == ["sneaky.txt"] and change.after == "the results of c1"
    assert change.stops is (approve == "deny")
    if approve == "deny":
        assert outcome.stop_reason is StopReason.POLICY_BLOCK
        assert "unrequested change after the results of c1: added sneaky.txt" in outcome.detail


async def test_an_agent_that_exits_while_its_call_is_held_stops_the_run(
    tmp_path: Path, work: Path
) -> None:
    door_file = tmp_path / "door.json"
    decider = Decider()
    write = Call("Write", {"file_path": "a.txt", "content": "a\n"})
    with AnthropicLoopback([write]) as upstream:
        run = GatewayRun(work, door_command(door_file), MODEL, upstream.url, approver=decider)
        async with door_run(run, door_file) as door:
            client = Client(door.told, "messages", stream=False)
            client.user("write")
            asking = asyncio.ensure_future(client.ask())
            await until("the write held", lambda: "c1" in decider.waiting)
            door.end(0)
            outcome = await run.outcome()
            answer = await asking  # the agent is gone: its call answered all the same
            assert "the run has stopped (tool_failure" in answer.text
    assert outcome.stop_reason is StopReason.TOOL_FAILURE
    assert "exited (status 0) while its model call was held" in outcome.detail


async def test_without_a_check_nobody_to_ask_stops_ask_user(tmp_path: Path, work: Path) -> None:
    door_file = tmp_path / "door.json"
    with AnthropicLoopback([]) as upstream:
        run = GatewayRun(work, door_command(door_file), MODEL, upstream.url)
        async with door_run(run, door_file):
            pass
        outcome = await run.outcome()
    assert outcome.stop_reason is StopReason.ASK_USER
    assert outcome.detail == "the agent exited and no --check says whether the goal is met"


ENV = """
name = "gateway-env"
goal = "Write done.txt"
goal_check = ["{python}", "-c", "import os, sys; sys.exit(not os.path.exists('done.txt'))"]

[gateway]
agent = ["{python}", "AGENT", "messages", "whole", "write done.txt"]
model = "MODEL"
api_base = "URL"

[gateway.tools.Write]
risk = "read"
"""


async def test_a_gateway_env_folder_runs_on_a_copy_with_its_tools_risks(tmp_path: Path) -> None:
    """`[gateway]`: the agent's command, the upstream, and what its tools risk (here a Write
    its scenario says only reads: released even where writes are denied)."""
    env_dir = tmp_path / "gateway_env"
    (env_dir / "workspace").mkdir(parents=True)
    write = Call("Write", {"file_path": "done.txt", "content": "done\n"})
    with AnthropicLoopback([write, Text("Done.")]) as upstream:
        said = ENV.replace("AGENT", AGENT).replace("MODEL", MODEL).replace("URL", upstream.url)
        (env_dir / "scenario.toml").write_text(textwrap.dedent(said))
        bus, recorder = EventBus(), Recorder()
        bus.subscribe(recorder)
        prepared = prepare_run(RunOptions(env=str(env_dir)), approver=DenyApprover(), bus=bus)
        try:
            outcome = await prepared.runtime.run()
        finally:
            prepared.cleanup()
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert outcome.env == "gateway-env" and outcome.model == f"gateway gateway_agent ({MODEL})"
    [proposed] = [e for e in recorder.events if isinstance(e, CallProposed)]
    assert proposed.risk == "read"
    assert proposed.risk_source == '[gateway.tools.Write] risk = "read" in scenario.toml'
    assert not (env_dir / "workspace" / "done.txt").exists()  # the env folder untouched


def test_the_gateway_command_says_what_is_missing_before_anything_starts(
    cli: Any, tmp_path: Path
) -> None:
    base = ["gateway", "--goal", "g", "--workdir", str(tmp_path), "--headless", "--approve", "auto"]
    code, _, err = cli(*base, "--", sys.executable, AGENT)
    assert code == 2 and "gateway needs --model MODEL" in err
    code, _, err = cli(*base, "--model", MODEL, "--env", "ANTHROPIC_API_KEY=x", "--",
                       sys.executable, AGENT)  # fmt: skip
    assert code == 2 and "ANTHROPIC_API_KEY: set by the gateway for the agent" in err
    code, _, err = cli(*base, "--model", MODEL, "--", "no-such-agent-here")
    assert code == 2 and "no-such-agent-here: not found" in err
    with pytest.raises(SystemExit):
        cli(*base, "--model", MODEL, "--tool", "Bash=maybe", "--", sys.executable, AGENT)


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["bogus", "--goal", "g", "--model", MODEL, "--", "true"], "bogus"),
        (["--goal", "g", "bogus", "--model", MODEL, "--", "true"], "bogus"),
        (["--goal", "g", "--model", MODEL, "true"], "true"),
    ],
)
def test_a_stray_word_before_the_agents_command_is_named(
    argv: list[str], word: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopdeck.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["gateway", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"loopdeck gateway: error: unexpected argument {word!r} (the agent's command goes" in err
    assert "needs --goal" not in err


def test_the_gateway_command_runs_an_agent_end_to_end(cli: Any, tmp_path: Path) -> None:
    work = tmp_path / "mine"
    work.mkdir()
    write = Call("Write", {"file_path": "done.txt", "content": "done\n"})
    check = f"{sys.executable} -c \"import os, sys; sys.exit(not os.path.exists('done.txt'))\""
    with AnthropicLoopback([write, Text("Done.")]) as upstream:
        code, summary, err = cli(
            "gateway", "--goal", "Write done.txt", "--workdir", str(work), "--check", check,
            "--model", MODEL, "--api-base", upstream.url, "--tool", "Write=write",
            "--headless", "--json", "--approve", "auto", "--db", str(tmp_path / "s.db"),
            "--run-id", "gw-one", "--", sys.executable, AGENT, "messages", "stream", "go",
        )  # fmt: skip
    assert code == 0, err
    assert summary is not None and summary["stop_reason"] == "goal_met"
    assert summary["env"] == "gateway:gateway_agent" and summary["run_id"] == "gw-one"
    [call] = summary["calls"]
    assert call["tool"] == "Write: done.txt" and call["status"] == "executed"
    assert (work / "done.txt").read_text() == "done\n"


async def test_a_body_that_would_steer_litellm_itself_is_refused(
    tmp_path: Path, work: Path
) -> None:
    """`api_base`, `api_key`, `mock_response` in the agent's body would send the upstream's key
    elsewhere or fake an answer: refused naming them, never passed on."""
    door_file = tmp_path / "door.json"
    with AnthropicLoopback([]) as upstream:
        run = GatewayRun(work, door_command(door_file), MODEL, upstream.url)
        async with door_run(run, door_file) as door:
            body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
                    "api_base": "http://127.0.0.1:9", "mock_response": "hi"}  # fmt: skip
            async with httpx.AsyncClient() as client:
                reply = await client.post(
                    door.told["ANTHROPIC_BASE_URL"] + "/v1/messages", json=body,
                    headers={"x-api-key": door.told["ANTHROPIC_API_KEY"]},
                )  # fmt: skip
        await run.outcome()
        assert upstream.seen == []
    assert reply.status_code == 400
    said = reply.json()["error"]["message"]
    assert said.endswith(
        "not the agent's to set (its upstream is loopdeck's): api_base, mock_response"
    )
