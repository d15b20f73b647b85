"""What an MCP server hands loopdeck beyond text, and asks of it beyond its tools:

- a snapshot entry whose tool answers an embedded resource or an image: the state is what
  those parts hold (the resource's text, the image's digest), so a write moves the state
  hash and an outside change invalidates an approval;
- a `[mcp.tools.NAME]` override naming no tool of the server refuses the run (exit 2), in
  `run` and in `check`, naming the closest tools; `check` starts the server for it even when
  no script is run, and says every problem `run` would refuse (overrides, snapshot entries,
  scripts' calls) at once;
- a write cut off by the server's crash says why in its record, with its real duration;
- elicitation and sampling requests are the tool's error saying loopdeck does not answer
  them, never a crash with loopdeck's file and line;
- the server's log warnings are said on `loopdeck.mcp` in its words, and kept as the run's
  findings (events: stored, replayed, exported);
- a tool that requires an MCP task is left out of the tools offered, said once.

The server is written below (`SERVER_CODE`) into each test's folder; its state is
`store.json` in its working folder (the run's working copy).
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Recorder

from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import CallStatus, EventBus
from loopdeck.core.scenario import ScenarioError
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run

BOUND_S = 120.0  # a loaded 2-core machine's; each run here ends in seconds when idle

SERVER_CODE = '''
import base64, json, os, sys
from pathlib import Path
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (EmbeddedResource, ImageContent, SamplingMessage, TextContent,
                       TextResourceContents, ToolAnnotations, ToolExecution)
from pydantic import BaseModel

STORE = Path("store.json")
READ = ToolAnnotations(read_only_hint=True)


class Server(MCPServer):
    async def list_tools(self):
        tools = await super().list_tools()
        for tool in tools:
            if tool.name == "research":
                tool.execution = ToolExecution(task_support="required")
        return tools


server = Server("asks", version="1.0")


def _get():
    return json.loads(STORE.read_text()) if STORE.exists() else {}


def _put(key, text):
    d = _get(); d[key] = text; STORE.write_text(json.dumps(d))


@server.tool()
def set_value(key: str, text: str) -> str:
    """Write a value."""
    _put(key, text)
    return f"set {key}"


@server.tool(annotations=READ)
def state_embedded() -> list:
    """The store as an embedded resource."""
    text = json.dumps(_get(), sort_keys=True)
    inner = TextResourceContents(uri="asks://store", mimeType="application/json", text=text)
    return [EmbeddedResource(type="resource", resource=inner)]


@server.tool(annotations=READ)
def state_image() -> list:
    """The store as an image of a fixed size."""
    raw = json.dumps(_get(), sort_keys=True).encode().ljust(64, b" ")[:64]
    return [ImageContent(type="image", mimeType="image/png",
                         data=base64.b64encode(raw).decode())]


@server.tool()
def crash_write(key: str) -> str:
    """A write that kills the server after writing."""
    _put(key, "crashed")
    sys.stderr.write("about to die\\n"); sys.stderr.flush()
    os._exit(3)


class Confirm(BaseModel):
    ok: bool


@server.tool()
async def confirm_write(key: str, ctx: Context) -> str:
    """Asks the user to confirm, then writes."""
    answer = await ctx.elicit("Really overwrite?", Confirm)
    if answer.action == "accept" and answer.data.ok:
        _put(key, "confirmed")
        return "written"
    return f"not written ({answer.action})"


@server.tool(annotations=READ)
async def sample_read(ctx: Context) -> str:
    """Asks the client's model."""
    said = TextContent(type="text", text="hi")
    got = await ctx.request_context.session.create_message(
        [SamplingMessage(role="user", content=said)], max_tokens=10)
    return str(got)


@server.tool(annotations=READ)
async def noisy_read(ctx: Context) -> str:
    """Logs as it goes."""
    await ctx.info("starting")
    await ctx.warning("disk almost full")
    await ctx.error({"disk": "full"})
    return "ok"


@server.tool(annotations=READ)
def research(topic: str) -> str:
    """Runs only as an MCP task."""
    return topic


@server.resource("asks://store", mime_type="application/json")
def store() -> str:
    return json.dumps(_get(), sort_keys=True)


if __name__ == "__main__":
    server.run()
'''


def _env(tmp_path: Path, snapshot: str, scripts: str, extra: str = "") -> Path:
    env = tmp_path / "asks_env"
    env.mkdir()
    (env / "server.py").write_text(SERVER_CODE, encoding="utf-8")
    (env / "scenario.toml").write_text(
        f"""name = "asks"
goal = "Set key a."
model = "scripted"
mode = "react"
goal_check = ["{{python}}", "-c", "import json; assert 'a' in json.load(open('store.json'))"]

[budgets]
max_rounds = 10

[mcp]
command = ["{{python}}", "{{envdir}}/server.py"]
startup_timeout_s = 60
call_timeout_s = 30
snapshot = [{snapshot}]
{extra}
{scripts}
""",
        encoding="utf-8",
    )
    return env


def _calls(name: str, *calls: tuple[str, dict[str, Any]], expect: str = "") -> str:
    steps = "".join(
        f'[[scripts.{name}.executor]]\ntool = "{tool}"\nargs = {_toml(args)}\n'
        for tool, args in calls
    )
    said = f'expect = {{ stop_reason = "{expect}" }}\n' if expect else ""
    return f'[scripts.{name}]\n{said}{steps}[[scripts.{name}.executor]]\nfinal = "Done."\n'


def _toml(args: dict[str, Any]) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in args.items()) + " }"


async def _run(
    env: Path, script: str, approver: Any = None, approve: str = "auto"
) -> tuple[Any, Recorder]:
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    options = RunOptions(env=str(env), script=script, approve=approve)  # type: ignore[arg-type]
    prepared = prepare_run(options, approver=approver, bus=bus)
    if approver is not None:
        approver.workdir = prepared.runtime.env.workdir
    try:
        outcome = await asyncio.wait_for(prepared.runtime.run(), BOUND_S)
    finally:
        prepared.cleanup()
    return outcome, recorder


WRITES = _calls(
    "writes",
    ("set_value", {"key": "b", "text": "1"}),
    ("set_value", {"key": "b", "text": "2"}),
    ("set_value", {"key": "a", "text": "done"}),
)
PARTS = ["state_embedded", "state_image"]


# -- 1. a tool's image or embedded resource is the state it holds --------------------------------
@pytest.mark.parametrize("tool", PARTS)
async def test_each_write_moves_the_state_an_image_or_embedded_resource_holds(
    tmp_path: Path, tool: str
) -> None:
    outcome, rec = await _run(_env(tmp_path, f'{{ tool = "{tool}" }}', WRITES), "writes")
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    hashes = [e.state_hash for e in rec.kinds("call_proposed")]
    assert len(hashes) == 3 and len(set(hashes)) == 3  # each write changed what the part holds


class _ChangesOutside:
    """Approves each write, but the first time only after the store changed outside."""

    def __init__(self) -> None:
        self.workdir: Path | None = None
        self.asked = 0

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked += 1
        if self.asked == 1:
            assert self.workdir is not None
            (self.workdir / "store.json").write_text('{"b": "changed outside"}')
        return ApprovalDecision(call_id=request.call_id, approved=True, by="test")


@pytest.mark.parametrize("tool", PARTS)
async def test_an_outside_change_to_an_image_or_embedded_resource_invalidates_an_approval(
    tmp_path: Path, tool: str
) -> None:
    script = _calls("one", ("set_value", {"key": "a", "text": "done"}))
    approver = _ChangesOutside()
    outcome, rec = await _run(_env(tmp_path, f'{{ tool = "{tool}" }}', script), "one", approver)
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    [invalidated] = rec.kinds("approval_invalidated")
    assert "state" in invalidated.problem
    assert approver.asked == 2  # asked again about the state as it is now


async def test_the_models_placeholder_of_a_part_carries_its_digest(tmp_path: Path) -> None:
    script = _calls("look", ("state_image", {}), ("state_embedded", {}))
    outcome, _ = await _run(_env(tmp_path, '{ resource = "asks://store" }', script), "look")
    image, embedded = (call.result["data"]["parts"][0] for call in outcome.calls)
    assert image.startswith("[image image/png, 64 bytes, sha256 ")
    assert embedded.startswith("[resource asks://store application/json, 2 characters, sha256 ")


# -- 2. an override naming no tool of the server --------------------------------------------------
def test_an_override_naming_no_tool_of_the_server_refuses_the_run(tmp_path: Path) -> None:
    script = _calls("one", ("set_value", {"key": "a", "text": "done"}))
    env = _env(
        tmp_path, '{ resource = "asks://store" }', script, '[mcp.tools.set_valu]\nrisk = "read"'
    )
    with pytest.raises(ScenarioError) as refused:
        prepare_run(RunOptions(env=str(env), script="one", approve="deny"))
    said = str(refused.value)
    assert "[mcp.tools.set_valu]: the server has no tool set_valu" in said
    assert said.endswith("did you mean set_value?")


def test_run_and_check_refuse_an_unknown_override_with_exit_2(tmp_path: Path) -> None:
    script = _calls("one", ("set_value", {"key": "a", "text": "done"}), expect="goal_met")
    env = _env(
        tmp_path, '{ resource = "asks://store" }', script, "[mcp.tools.deploy]\nexempt = true"
    )
    db = str(tmp_path / "runs.db")
    for command in (
        ["run", str(env), "--script", "one", "--headless", "--approve", "deny", "--db", db],
        ["check", str(env)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "loopdeck", *command],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "[mcp.tools.deploy]: the server has no tool deploy" in done.stderr
        assert "it lists set_value, state_embedded" in done.stderr


def test_check_starts_the_server_and_says_every_problem_run_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No script declares an `expect`, so none is run: `check` still starts the server once
    and says each problem, as `run` refuses them."""
    from loopdeck.cli import main

    script = _calls("one", ("set_vlue", {"key": "a", "text": "done"}))
    overrides = '[mcp.tools.set_valu]\nrisk = "read"\n[mcp.tools.deploy]\nexempt = true'
    env = _env(tmp_path, '{ tool = "peek_all" }', script, overrides)
    assert main(["check", str(env)]) == 2
    said = capsys.readouterr().err
    where = f"{env / 'scenario.toml'}: "
    assert f"{where}[mcp.tools.set_valu]: the server has no tool set_valu" in said, said
    assert f"{where}[mcp.tools.deploy]: the server has no tool deploy" in said, said
    assert f'{where}[mcp] snapshot entry 1 (tool = "peek_all"): the server has no tool' in said
    assert f"{where}script 'one', executor turn 1: unknown tool 'set_vlue'" in said, said
    assert "NOTE" not in capsys.readouterr().out


@pytest.mark.slow  # a server for the check, another for the run: seconds
def test_check_of_a_sound_mcp_env_starts_its_server_once_and_runs_its_scripts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopdeck.cli import main

    script = _calls("one", ("set_value", {"key": "a", "text": "done"}), expect="goal_met")
    env = _env(tmp_path, '{ resource = "asks://store" }', script, "[mcp.tools.set_value]\n")
    assert main(["check", str(env)]) == 0, capsys.readouterr()
    assert "PASS  one: goal_met" in capsys.readouterr().out


# -- 3. a write cut off by the server's crash ----------------------------------------------------
async def test_a_write_the_server_crashed_under_says_why_and_how_long_it_ran(
    tmp_path: Path,
) -> None:
    script = _calls("crash", ("crash_write", {"key": "c"}))
    outcome, rec = await _run(_env(tmp_path, '{ resource = "asks://store" }', script), "crash")
    assert outcome.stop_reason is StopReason.TOOL_FAILURE, outcome.detail
    assert "went away (exit status 3)" in outcome.detail
    [call] = outcome.calls
    assert call.status is CallStatus.OUTCOME_UNKNOWN
    assert call.result["error"]["code"] == "OUTCOME_UNKNOWN"
    said = call.result["error"]["message"]
    assert said.startswith("crash_write was cut short by the run's stop: MCP server `")
    assert "went away (exit status 3)" in said and "about to die" in said
    assert call.duration_ms is not None and call.duration_ms > 0
    [finished] = rec.kinds("tool_finished")
    assert finished.result == call.result and finished.duration_ms == call.duration_ms


# -- 4. elicitation and sampling -----------------------------------------------------------------
async def test_elicitation_and_sampling_are_the_tools_error_saying_loopdeck_does_not_answer(
    tmp_path: Path,
) -> None:
    script = _calls("ask", ("confirm_write", {"key": "x"}), ("sample_read", {}))
    outcome, _ = await _run(_env(tmp_path, '{ resource = "asks://store" }', script), "ask")
    assert outcome.stop_reason is not StopReason.CRASHED, outcome.detail
    confirm, sample = outcome.calls
    for call, asked in ((confirm, "(elicitation)"), (sample, "(sampling)")):
        assert call.status is CallStatus.FAILED, call
        error = call.result["error"]
        assert error["code"] == "TOOL_ERROR"
        assert f"{call.tool}: the server asked the client for" in error["message"]
        assert asked in error["message"]
        assert "loopdeck does not answer elicitation, sampling or roots" in error["message"]
        assert ".py:" not in error["message"]  # never loopdeck's file and line


# -- 5. the server's log messages -----------------------------------------------------------------
async def test_the_servers_warnings_and_errors_are_said_in_its_words(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="loopdeck.mcp")
    script = _calls("noisy", ("noisy_read", {}))
    outcome, recorder = await _run(_env(tmp_path, '{ resource = "asks://store" }', script), "noisy")
    assert outcome.calls[0].status is CallStatus.EXECUTED
    records = [r for r in caplog.records if r.name == "loopdeck.mcp"]
    said = [(r.levelno, r.getMessage()) for r in records if " logged " in r.getMessage()]
    named = f"MCP server `{sys.executable} {tmp_path / 'asks_env' / 'server.py'}`"
    assert said == [
        (logging.WARNING, f"{named} logged warning: disk almost full"),
        (logging.ERROR, f'{named} logged error: {{"disk": "full"}}'),
    ]  # info is not said
    # Each is the run's finding too: an event (live, stored, replayed, exported) and a line
    # of its outcome.
    found = [event.text for event in recorder.kinds("finding")]
    assert found == [words for _, words in said]
    assert [f"round {e.round}: {e.text}" for e in recorder.kinds("finding")] == [
        f for f in outcome.findings if " logged " in f
    ]


async def test_what_a_server_logs_before_its_run_listens_is_told_once_it_does() -> None:
    from types import SimpleNamespace

    from loopdeck.mcp_env.server_log import LOGGED_SHOWN, ServerLog

    log = ServerLog("srv")
    for number in range(LOGGED_SHOWN + 5):
        await log.logged(SimpleNamespace(level="warning", logger=None, data=f"w{number}"))
    await log.logged(SimpleNamespace(level="info", logger=None, data="not said"))
    told: list[str] = []
    log.tell(lambda words, raised: told.append(words))
    assert told[0] == "MCP server `srv` logged warning: w0"
    assert told[LOGGED_SHOWN - 1].endswith(f": w{LOGGED_SHOWN - 1}")
    assert told[LOGGED_SHOWN:] == [
        f"MCP server `srv` logged more than {LOGGED_SHOWN} warnings; the rest are not shown"
    ]


# -- 6. a tool that runs only as a task -----------------------------------------------------------
async def test_a_tool_that_requires_a_task_is_not_offered_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="loopdeck.mcp")
    script = _calls("one", ("set_value", {"key": "a", "text": "done"}))
    env = _env(tmp_path, '{ resource = "asks://store" }', script)
    prepared = prepare_run(RunOptions(env=str(env), script="one", approve="auto"))
    try:
        offered = [spec.name for spec in prepared.runtime.env.tools()]
    finally:
        prepared.cleanup()
    assert "research" not in offered and "set_value" in offered
    said = [r.getMessage() for r in caplog.records if r.name == "loopdeck.mcp"]
    assert len(said) == 1
    assert said[0].endswith(
        ": research left out of the tools offered to the model: it runs only as an MCP task"
        ' (execution.taskSupport = "required"), which loopdeck does not run'
    )


def test_a_snapshot_entry_naming_a_tool_that_requires_a_task_refuses_the_run(
    tmp_path: Path,
) -> None:
    script = _calls("one", ("set_value", {"key": "a", "text": "done"}))
    env = _env(tmp_path, '{ tool = "research", args = { topic = "x" } }', script)
    with pytest.raises(ScenarioError) as refused:
        prepare_run(RunOptions(env=str(env), script="one", approve="deny"))
    said = '[mcp] snapshot entry 1 (tool = "research"): the server runs research only as an MCP'
    assert said in str(refused.value)
