"""MCP servers as environments (issue 28): tools from the server with their risk and where it
came from, state from a resource, the goal from a command, and servers that misbehave: a tool
error, 10 MB, a hang under the kill switch, a crash, garbage on stdout, a failed start, and
no server left behind when the runner is killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Recorder
from process_helpers import live_processes
from store_helpers import last_json

from loopdeck.core.events import CallStatus, EventBus
from loopdeck.core.scenario import ScenarioError
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run

EDGES = Path(__file__).parent / "envs" / "mcp_edges"
SERVER = str(EDGES / "server.py")


def _prepared(script: str, *settings: str, approve: str = "auto") -> tuple[Any, Recorder]:
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    options = RunOptions(
        env=str(EDGES),
        script=script,
        approve=approve,
        settings=list(settings),  # type: ignore[arg-type]
    )
    return prepare_run(options, bus=bus), recorder


async def _run(script: str, *settings: str) -> tuple[Any, Recorder, Any]:
    prepared, recorder = _prepared(script, *settings)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return outcome, recorder, prepared


def _servers() -> list[int]:
    """Live processes running the edges server (zombies are gone already)."""
    return live_processes(SERVER)


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_the_servers_tools_carry_their_risk_and_where_it_came_from() -> None:
    prepared, _ = _prepared("solve", "mcp.tools.touch_log.risk=write")
    try:
        tools = prepared.runtime.tools
        said = {name: (spec.risk, spec.risk_source) for name, spec in tools.items()}
    finally:
        prepared.cleanup()
    assert said["peek"] == ("read", "server says read-only")
    assert said["bump"] == ("write", "no annotation: treated as write")
    assert said["touch_log"] == ("write", "scenario override")
    assert tools["bump"].args_model.model_json_schema()["properties"]["by"]["type"] == "integer"
    assert _servers() == []  # cleanup stopped the server


@pytest.mark.slow  # 10 MB through the SDK: seconds
async def test_a_tool_error_a_huge_result_and_a_goal_met_by_the_command() -> None:
    outcome, _, _ = await _run("huge")
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    huge = outcome.calls[0]
    assert huge.status is CallStatus.EXECUTED and huge.result["truncated"] is True
    assert len(str(huge.result)) < 10_000
    outcome, _, _ = await _run("fail")
    failed = outcome.calls[0]
    assert failed.status is CallStatus.FAILED
    assert failed.result["error"]["code"] == "TOOL_ERROR"
    assert "the widget is jammed" in failed.result["error"]["message"]
    assert outcome.stop_reason is StopReason.GOAL_MET


@pytest.mark.slow
async def test_the_state_hash_moves_only_when_the_resource_does() -> None:
    outcome, rec, _ = await _run("snapshots")
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    hashes = [e.state_hash for e in rec.kinds("call_proposed")]
    assert hashes[0] == hashes[1]  # touch_log wrote a file outside the state
    assert hashes[1] != hashes[2]  # bump changed the resource


@pytest.mark.slow
async def test_writes_need_approval_unless_overridden_to_read() -> None:
    outcome, rec, _ = await _run("solve")
    assert [e.tool for e in rec.kinds("approval_requested")] == ["bump"]
    outcome, rec, _ = await _run("solve", "mcp.tools.bump.risk=read")
    assert rec.kinds("approval_requested") == []
    assert outcome.stop_reason is StopReason.GOAL_MET


@pytest.mark.slow
async def test_a_server_that_dies_mid_call_stops_the_run_naming_it_with_its_stderr() -> None:
    outcome, _, _ = await _run("die")
    assert outcome.stop_reason is StopReason.TOOL_FAILURE, outcome.detail
    assert "MCP server" in outcome.detail and "server.py" in outcome.detail
    assert "out of widgets" in outcome.detail
    assert "went away (exit status 3)" in outcome.detail  # it exited by itself, with 3
    assert _servers() == []


@pytest.mark.slow
async def test_kill_ends_a_hanging_call_and_the_server_is_stopped() -> None:
    prepared, rec = _prepared("hang")
    runtime = prepared.runtime
    task = asyncio.ensure_future(runtime.run())
    try:
        while not _servers() or runtime.machine.state.value != "executing":
            await asyncio.sleep(0.02)
        runtime.kill(by="test")
        outcome = await asyncio.wait_for(task, 30)
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.KILLED
    assert [e.status for e in rec.kinds("tool_finished")] == [CallStatus.INTERRUPTED]
    assert _servers() == []


@pytest.mark.slow
async def test_garbage_on_the_servers_stdout_is_not_fatal() -> None:
    wrapped = f'["sh", "-c", "echo not json; echo {{broken; exec {sys.executable} {SERVER}"]'
    outcome, _, _ = await _run("solve", f"mcp.command={wrapped}")
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail


def test_a_server_that_cannot_start_is_named_with_its_stderr() -> None:
    failing = (
        '["{python}", "-c", "import sys; print(\'no license key\', file=sys.stderr); exit(4)"]'
    )
    with pytest.raises(ScenarioError) as raised:
        _prepared("solve", f"mcp.command={failing}")
    said = str(raised.value)
    assert "did not start" in said and "no license key" in said


def test_an_mcp_env_without_code_must_say_its_state_and_goal(tmp_path: Path) -> None:
    env = tmp_path / "bare"
    env.mkdir()
    (env / "scenario.toml").write_text(
        'name = "bare"\ngoal = "g"\n[mcp]\ncommand = ["true"]\n', encoding="utf-8"
    )
    with pytest.raises(ScenarioError, match=r"\[mcp\] has no snapshot"):
        prepare_run(RunOptions(env=str(env), script="x"))
    text = (env / "scenario.toml").read_text() + 'snapshot = "none"\n'
    (env / "scenario.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError, match="no goal_check"):
        prepare_run(RunOptions(env=str(env), script="x"))


@pytest.mark.slow
def test_no_server_is_left_when_the_runner_is_killed_with_sigkill(tmp_path: Path) -> None:
    runner = subprocess.Popen(
        [sys.executable, "-m", "loopdeck", "run", str(EDGES), "--script", "hang", "--headless",
         "--approve", "auto", "--db", str(tmp_path / "s.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        for _ in range(600):
            if _servers():
                break
            runner.poll()
            assert runner.returncode is None, runner.stderr.read() if runner.stderr else ""
            subprocess.run(["sleep", "0.05"], check=False)
        assert _servers(), "the server never started"
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(10)
        for _ in range(200):  # the guardian ends the server's group as its runner dies
            if not _servers():
                break
            subprocess.run(["sleep", "0.05"], check=False)
        assert _servers() == []
    finally:
        runner.kill()


@pytest.mark.slow
def test_the_sample_mcp_env_solves_headless_from_the_cli(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopdeck", "run", "notes_mcp", "--script", "solve", "--headless",
         "--json", "--approve", "auto", "--db", str(tmp_path / "s.db")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = last_json(done.stdout)
    assert summary["stop_reason"] == "goal_met"
    assert [c["tool"] for c in summary["calls"]][-2:] == ["write_note", "delete_note"]


@pytest.mark.slow
async def test_an_mcp_run_is_decided_from_another_terminal_on_either_store(db: Any) -> None:
    """The store, the CLI and export work for an MCP run as for any: its writes wait, are
    approved from another process, and its record says where each risk came from."""
    from store_helpers import loopdeck, start_runner, wait_for_pending

    runner = start_runner("notes_mcp", "solve", db, "--approve", "wait")
    try:
        for call in ("c5", "c6"):
            pending = await wait_for_pending(db, 60.0, call)
            assert loopdeck("approve", pending["run_id"], call, db=db).returncode == 0
        out, err = runner.communicate(timeout=60)
    finally:
        runner.kill()
    summary = last_json(out)
    assert summary["stop_reason"] == "goal_met", err
    exported = loopdeck("export", summary["run_id"], db=db).stdout
    assert '"risk_source":"no annotation: treated as write"' in exported  # delete_note
    assert '"risk_source":"server says read-only"' in exported
