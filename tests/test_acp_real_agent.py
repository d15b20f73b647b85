"""A real ACP agent from npm under loopdeck, offline (issue 29): Claude Code through its ACP
adapter (`@agentclientprotocol/claude-agent-acp`, which ships the `claude` binary), its model a
loopback Anthropic Messages API playing a script (`anthropic_loopback.py`), run headless through
the real CLI: an approved edit lands and the goal is met; a denied one never lands and the
refusal reaches the model; a stop while the agent waits on its model ends the run and every
process of the agent. Every request body Claude Code sends is checked as the API would.

Needs node and npx (the package is fetched from the registry into npm's cache the first time,
about 600 MB). Claude Code's mode is set to `default`: the adapter starts in `auto`, where a
classifier approves edits and no permission ever reaches loopdeck.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from acp_agents import (
    NEEDS_NPX,
    RUN_TIMEOUT_S,
    agent_processes,
    events,
    kinds,
    loopdeck,
    npm_cache,
    run_headless,
)
from anthropic_loopback import AnthropicLoopback, Seen, Step, Text, ToolUse
from conftest import SAMPLES

PACKAGE = "@agentclientprotocol/claude-agent-acp@0.101.0"

pytestmark = [pytest.mark.slow, NEEDS_NPX]  # each run starts Claude Code: 10-20 s


def workdir_of(body: dict[str, Any]) -> str:
    """The working copy loopdeck started the agent in, as Claude Code tells its model."""
    found = re.search(r"Primary working directory: (\S+)", json.dumps(body).replace("\\n", "\n"))
    assert found, "Claude Code's request names no working directory"
    return found.group(1)


def read(name: str) -> Callable[[dict[str, Any]], ToolUse]:
    return lambda body: ToolUse(
        "Read", {"file_path": f"{workdir_of(body)}/{name}"}, f"Let me read {name}."
    )


def fix_add(body: dict[str, Any]) -> ToolUse:
    return ToolUse(
        "Edit",
        {
            "file_path": f"{workdir_of(body)}/calc.py",
            "old_string": "return a - b",
            "new_string": "return a + b",
        },
    )


FIX: list[Step] = [read("calc.py"), fix_add, Text("Fixed add in calc.py: it returned a - b.")]


def claude_env(root: Path, api: AnthropicLoopback) -> Path:
    """calc_acp's repo with Claude Code as its agent, its model the loopback API, its home a
    scratch folder (no user settings read, none written), npm's cache the user's (the 200 MB
    binary fetched once). IS_SANDBOX is emptied: where it is set and the user is root, the
    adapter starts `claude --dangerously-skip-permissions`, which Claude Code refuses as root."""
    env = root / "calc_claude"
    shutil.copytree(SAMPLES / "calc_acp" / "workspace", env / "workspace")
    home = root / "home"
    home.mkdir()
    agent_env = {
        "ANTHROPIC_BASE_URL": api.url,
        "ANTHROPIC_API_KEY": "sk-ant-loopback",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "IS_SANDBOX": "",
        "npm_config_cache": npm_cache(),
        "npm_config_update_notifier": "false",
    }
    table = ", ".join(f"{name} = {json.dumps(value)}" for name, value in agent_env.items())
    (env / "scenario.toml").write_text(
        f"""
name = "calc_claude"
goal = "Make the tests in test_calc.py pass: fix calc.py, do not touch the tests."
mode = "react"
goal_check = ["{{python}}", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_calc.py"]
requires = ["pytest"]

[agent]
acp = ["npx", "-y", "{PACKAGE}"]
mode = "default"
env = {{ {table} }}
startup_timeout_s = {RUN_TIMEOUT_S}

# loopdeck asks an [agent] env for a script even when its agent plays none
[[scripts.solve.turns]]
steps = [{{ message = "not played: Claude Code is the agent" }}]

[budgets]
max_turns = 10
max_tool_calls = 20
max_tokens = 2000000
max_cost_usd = 5
deadline_s = {RUN_TIMEOUT_S}
max_rounds = 2
""",
        encoding="utf-8",
    )
    return env


def tool_results(seen: Seen) -> dict[str, dict[str, Any]]:
    """The tool_result blocks of a request, by the tool_use id they answer."""
    last = seen.body["messages"][-1]
    blocks = last["content"] if isinstance(last["content"], list) else []
    return {b["tool_use_id"]: b for b in blocks if b.get("type") == "tool_result"}


def edit_id(api: AnthropicLoopback) -> str:
    """The id the loopback gave the scripted Edit, as Claude Code sent it back."""
    for seen in api.main_requests():
        for message in seen.body["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if block.get("type") == "tool_use" and block["name"] == "Edit":
                    return str(block["id"])
    raise AssertionError("Claude Code never sent the scripted Edit back")


def test_claude_code_fixes_the_repo_with_the_operators_approval(tmp_path: Path) -> None:
    db = tmp_path / "loopdeck.db"
    with AnthropicLoopback(FIX) as api:
        env = claude_env(tmp_path, api)
        outcome = run_headless(env, db, "auto")
    assert outcome["stop_reason"] == "goal_met", outcome["detail"]
    assert api.problems() == []
    found = events(outcome["run_id"], db)
    [asked] = kinds(found, "approval_requested")
    # Approved on the edit's whole input (Claude Code's first word of it had none), its
    # diff one line a side.
    assert asked["args"]["old_string"] == "return a - b"
    assert asked["args"]["new_string"] == "return a + b"
    assert asked["args"]["file_path"].endswith("/calc.py")
    assert "\n-return a - b\n+return a + b\n" in asked["rationale"]
    [decided] = kinds(found, "approval_decided")
    assert decided["call_id"] == asked["call_id"] and decided["approved"] is True
    finished = {e["call_id"]: e["status"] for e in kinds(found, "tool_finished")}
    assert finished[asked["call_id"]] == "executed"
    [verdict] = kinds(found, "review_verdict")
    assert verdict["verdict"] == "pass" and verdict["before_hash"] != verdict["after_hash"]
    # The edit Claude Code made itself, after loopdeck's approval, is what the model was told.
    [after_edit] = [s for s in api.main_requests() if edit_id(api) in tool_results(s)]
    result = tool_results(after_edit)[edit_id(api)]
    assert not result.get("is_error") and "updated successfully" in str(result["content"])
    assert len(api.main_requests()) == 3  # read, edit, the last word: no retry, no refusal
    assert agent_processes(tmp_path / "home") == []


def test_a_denied_edit_never_lands_and_claude_code_is_told(tmp_path: Path) -> None:
    db = tmp_path / "loopdeck.db"
    script: list[Step] = [read("calc.py"), fix_add, Text("I was not allowed to edit calc.py.")]
    with AnthropicLoopback(script) as api:
        env = claude_env(tmp_path, api)
        outcome = run_headless(env, db, "deny")
    # The working copy never changed in the turn: the round stalls, as for any agent.
    assert outcome["stop_reason"] == "stalled", outcome["detail"]
    assert api.problems() == []
    found = events(outcome["run_id"], db)
    [decided] = kinds(found, "approval_decided")
    assert decided["approved"] is False
    finished = {e["call_id"]: e["status"] for e in kinds(found, "tool_finished")}
    assert finished[decided["call_id"]] == "rejected"
    [verdict] = kinds(found, "review_verdict")
    assert verdict["before_hash"] == verdict["after_hash"]
    [after_edit] = [s for s in api.main_requests() if edit_id(api) in tool_results(s)]
    refused = tool_results(after_edit)[edit_id(api)]
    assert refused["is_error"] is True and "refused permission" in str(refused["content"])
    assert agent_processes(tmp_path / "home") == []


def started_run(errfile: Path, proc: subprocess.Popen[str], api: AnthropicLoopback) -> str:
    """The run's id, once Claude Code's first request to its model is being held."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not api.hanging.wait(0.2):
        assert proc.poll() is None, errfile.read_text()
        assert time.monotonic() < deadline, "Claude Code never called its model"
    said = re.search(r"run ([0-9a-f]+) started", errfile.read_text())
    assert said, errfile.read_text()
    return said.group(1)


def run_held_then(tmp_path: Path, stop: Callable[[subprocess.Popen[str], str, Path], None]) -> Any:
    """A run whose model never answers, stopped by `stop` once the agent waits on it."""
    db, errfile = tmp_path / "loopdeck.db", tmp_path / "run.err"
    with AnthropicLoopback(FIX) as api:
        api.hang = True
        env = claude_env(tmp_path, api)
        command = [
            sys.executable,
            "-m",
            "loopdeck",
            "run",
            str(env),
            "--headless",
            "--json",
            "--approve",
            "auto",
            "--db",
            str(db),
        ]
        with errfile.open("w") as err:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            run_id = started_run(errfile, proc, api)
            stop(proc, run_id, db)
            stdout, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert api.problems() == []
    return json.loads(stdout.strip().splitlines()[-1]), proc.returncode


def test_a_stop_while_claude_code_waits_on_its_model_cancels_the_run(tmp_path: Path) -> None:
    def cancel(_: Any, run_id: str, db: Path) -> None:
        done = loopdeck("cancel", run_id, "--db", str(db))
        assert done.returncode == 0, done.stderr

    outcome, _ = run_held_then(tmp_path, cancel)
    assert outcome["stop_reason"] == "cancelled", outcome["detail"]
    assert agent_processes(tmp_path / "home") == []


def test_sigint_while_claude_code_waits_on_its_model_kills_the_run(tmp_path: Path) -> None:
    def interrupt(proc: subprocess.Popen[str], *_: Any) -> None:
        proc.send_signal(signal.SIGINT)

    outcome, code = run_held_then(tmp_path, interrupt)
    assert outcome["stop_reason"] == "killed" and "SIGINT" in outcome["detail"]
    assert code == -signal.SIGINT
    assert agent_processes(tmp_path / "home") == []


def test_two_reads_of_different_files_are_not_a_repeat(tmp_path: Path) -> None:
    db = tmp_path / "loopdeck.db"
    with AnthropicLoopback([read("calc.py"), read("test_calc.py"), *FIX[1:]]) as api:
        env = claude_env(tmp_path, api)
        outcome = run_headless(env, db, "auto")
    assert outcome["stop_reason"] == "goal_met", outcome["detail"]
    found = events(outcome["run_id"], db)
    assert kinds(found, "guard_tripped") == []
    reads = [e for e in kinds(found, "call_proposed") if e["tool"].startswith("read: ")]
    assert [e["tool"] for e in reads] == ["read: Read calc.py", "read: Read test_calc.py"]
    assert [Path(e["args"]["file_path"]).name for e in reads] == ["calc.py", "test_calc.py"]
