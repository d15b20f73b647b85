"""Gemini CLI under loopdeck, offline (issue 36): npm `@google/gemini-cli@0.61.0`, started as
`gemini --acp --model gemini-2.5-flash` (through `acp_trace.py`, which keeps every ACP message),
its model a loopback Gemini API playing a script (`gemini_loopback.py`, pointed at by
`GOOGLE_GEMINI_BASE_URL`, which makes Gemini CLI take the "gateway" auth with any
`GEMINI_API_KEY`), its HOME a scratch folder. Env: `envs/calc_gemini`. Every request body
Gemini CLI sends is checked as the API would (roles, each functionResponse answering the calls
of the model turn before it, by name and id).

What Gemini CLI 0.61 does over ACP (the trace): modes `default` (asks), `autoEdit`, `yolo`
(asks nothing; refused in a folder it does not trust unless `GEMINI_CLI_TRUST_WORKSPACE=true`)
and `plan`; a tool call never carries `rawInput` (a read is `tool_call` in_progress with its
title and locations; an edit is a permission request, status pending, with its title, its
locations and a diff, then `fs/write_text_file` through loopdeck once allowed); permission
options `proceed_always` (allow_always), `proceed_once` (allow_once), `cancel` (reject_once);
the shell runs in Gemini CLI itself (not loopdeck's terminals); no `usage_update`: the turn's
tokens only in the prompt response's `_meta.quota`.

Needs node and npx (the package is fetched into npm's cache the first time, about 100 MB).
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest
from acp_agents import (
    ENVS,
    NEEDS_NPX,
    RUN_TIMEOUT_S,
    Scratch,
    agent_processes,
    agent_requests,
    agent_updates,
    daemons,
    end_survivors,
    events,
    gone_or_left,
    kinds,
    last_json,
    loopdeck,
    pending_call,
    permission_answers,
    processes_said,
    run_headless,
    running,
    said,
    statuses,
    wait_until,
)
from gemini_loopback import Call, GeminiLoopback, Step, Text

PACKAGE = "@google/gemini-cli@0.61.0"
ENV = ENVS / "calc_gemini"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
# SIGHUP ignored first: Gemini CLI runs the command in a pty, whose close hangs up a child that
# has not yet left the shell's session.
DAEMON = "trap '' HUP; setsid sleep 6131 >/dev/null 2>&1 </dev/null &"

pytestmark = [pytest.mark.slow, NEEDS_NPX]  # each run starts Gemini CLI: 10-20 s


def read(name: str = "calc.py") -> Call:
    return Call("read_file", {"file_path": name}, f"Let me read {name}.")


FIX = Call(
    "replace",
    {
        "file_path": "calc.py",
        "old_string": "return a - b",
        "new_string": "return a + b",
        "instruction": "add must add",
    },
)


def write(content: str) -> Call:
    return Call("write_file", {"file_path": "calc.py", "content": content})


def shell(command: str) -> Call:
    return Call("run_shell_command", {"command": command, "description": "as scripted"})


def scratch_for(tmp_path: Path, api: GeminiLoopback) -> Scratch:
    return Scratch(tmp_path, api.url)


def test_an_approved_edit_lands_once_and_the_goal_is_met(tmp_path: Path) -> None:
    with GeminiLoopback([read(), FIX, Text("Fixed add in calc.py.")]) as api:
        scratch = scratch_for(tmp_path, api)
        outcome = run_headless(ENV, scratch, "auto")
    why = said(scratch, api, outcome)
    assert outcome["stop_reason"] == "goal_met", why
    assert api.problems() == [], why
    found = events(outcome["run_id"], scratch.db)
    [asked] = kinds(found, "approval_requested")
    # No rawInput: the approval is bound to what Gemini CLI shows, the file and its diff.
    assert asked["args"].get("locations") == ["calc.py"], why
    [diff] = asked["args"]["diffs"]
    assert diff["path"] == "calc.py" and diff["new_text"] == FIXED, why
    assert "\n-    return a - b\n+    return a + b\n" in asked["rationale"], why
    [decided] = kinds(found, "approval_decided")
    assert decided["call_id"] == asked["call_id"] and decided["approved"] is True
    assert statuses(found)[asked["call_id"]] == "executed", why
    # Gemini CLI asks loopdeck to write the file: once, the whole fixed file.
    writes = agent_requests(scratch, "fs/write_text_file")
    assert [w["content"] for w in writes] == [FIXED], why
    [verdict] = kinds(found, "review_verdict")
    assert verdict["verdict"] == "pass" and verdict["before_hash"] != verdict["after_hash"]
    assert kinds(found, "unrequested_change") == [], why
    # No usage_update, no `usage` in the prompt's answer (only its `_meta.quota`): the run's
    # tokens are unknown, never 0.
    assert agent_updates(scratch, "usage_update") == [], why
    assert outcome["tokens"] is None, why
    assert agent_processes(scratch.home) == []


def test_a_denied_edit_never_lands(tmp_path: Path) -> None:
    script: list[Step] = [read(), FIX, Text("I was not allowed to edit calc.py.")]
    with GeminiLoopback(script) as api:
        scratch = scratch_for(tmp_path, api)
        outcome = run_headless(ENV, scratch, "deny")
    why = said(scratch, api, outcome)
    assert outcome["stop_reason"] != "goal_met", why
    assert outcome["stop_reason"] == "stalled", why
    assert api.problems() == [], why
    found = events(outcome["run_id"], scratch.db)
    [decided] = kinds(found, "approval_decided")
    assert decided["approved"] is False
    assert statuses(found)[decided["call_id"]] == "rejected", why
    [verdict] = kinds(found, "review_verdict")
    assert verdict["before_hash"] == verdict["after_hash"], why
    assert any("calc.add(2, 3) is -1" in line for line in outcome["findings"]), why
    assert agent_requests(scratch, "fs/write_text_file") == [], why
    # Gemini CLI was answered with its reject option, and its model told the call was refused.
    assert permission_answers(scratch) == ["cancel"], why
    # Gemini CLI goes on after a rejection: its model is told the call was cancelled.
    [told] = api.main_requests()[-1].body["contents"][-1]["parts"]
    assert "canceled by the user" in told["functionResponse"]["response"]["error"], why
    assert agent_processes(scratch.home) == []


def test_two_different_writes_to_one_file_are_two_keys(tmp_path: Path) -> None:
    """Both denied, so the working copy never changes between them: only what the agent shows
    (the diff: Gemini CLI sends no rawInput) can tell them apart."""
    first = "def add(a, b):\n    return b + a\n"
    script: list[Step] = [write(first), write(FIXED), Text("I could not write calc.py.")]
    with GeminiLoopback(script) as api:
        scratch = scratch_for(tmp_path, api)
        outcome = run_headless(ENV, scratch, "deny")
    why = said(scratch, api, outcome)
    assert api.problems() == [], why
    found = events(outcome["run_id"], scratch.db)
    proposed = [e for e in kinds(found, "call_proposed") if e["tool"].startswith("edit:")]
    assert len(proposed) == 2, why
    assert proposed[0]["state_hash"] == proposed[1]["state_hash"], why
    assert proposed[0]["fingerprint"] != proposed[1]["fingerprint"], why
    assert kinds(found, "guard_tripped") == [], why
    assert [statuses(found)[e["call_id"]] for e in proposed] == ["rejected", "rejected"], why
    prints = {c["fingerprint"] for c in outcome["calls"]}
    assert len(prints) == 2, why
    assert outcome["stop_reason"] == "stalled", why


def test_identical_reads_from_one_state_are_one_key(tmp_path: Path) -> None:
    script: list[Step] = [read(), read(), Text("Read it twice.")]
    with GeminiLoopback(script) as api:
        scratch = scratch_for(tmp_path, api)
        outcome = run_headless(ENV, scratch, "auto")
    why = said(scratch, api, outcome)
    assert api.problems() == [], why
    found = events(outcome["run_id"], scratch.db)
    reads = [e for e in kinds(found, "call_proposed") if e["tool"].startswith("read:")]
    assert len(reads) == 2, why
    assert reads[0]["fingerprint"] == reads[1]["fingerprint"], why
    [tripped] = kinds(found, "guard_tripped")
    assert tripped["call_id"] == reads[1]["call_id"], why
    assert statuses(found).get(reads[1]["call_id"]) == "blocked_repeat", why
    assert outcome["stop_reason"] == "no_progress", why
    assert agent_processes(scratch.home) == []


def test_an_edit_of_gemini_clis_own_call_is_refused(tmp_path: Path) -> None:
    """`loopdeck approve --args` on a permission Gemini CLI asked: it runs its own input, so
    the edit is refused (exit non-zero, saying so) and nothing is decided; a plain rejection
    then goes through."""
    script: list[Step] = [FIX, Text("I was not allowed to edit calc.py.")]
    with GeminiLoopback(script) as api:
        scratch = scratch_for(tmp_path, api)
        with running(ENV, scratch, "wait") as runner:
            run_id = runner.run_id()
            waiting = pending_call(scratch, run_id, runner)
            edit = {"file_path": "calc.py", "old_string": "a - b", "new_string": "b + a"}
            db = ("--db", str(scratch.db))
            refused = loopdeck(
                "approve", run_id, waiting["call_id"], "--args", json.dumps(edit), *db
            )
            still = loopdeck("pending", "--json", *db)
            rejected = loopdeck("reject", run_id, waiting["call_id"], "--reason", "not now", *db)
            outcome = runner.outcome()
    why = said(scratch, api, outcome) + f"\napprove --args said: {refused.stderr}{refused.stdout}"
    assert refused.returncode != 0, why
    assert "runs its own input" in refused.stderr, why
    assert waiting["call_id"] in [p["call_id"] for p in json.loads(still.stdout)], why
    assert rejected.returncode == 0, rejected.stderr
    found = events(outcome["run_id"], scratch.db)
    [decided] = kinds(found, "approval_decided")
    assert decided["approved"] is False and decided.get("args") is None, why
    assert agent_requests(scratch, "fs/write_text_file") == [], why
    assert outcome["stop_reason"] == "stalled", why
    assert agent_processes(scratch.home) == []


def agent_command() -> tuple[list[str], dict[str, str]]:
    """The env folder's agent command and `[agent] env`, for `loopdeck acp`."""
    agent = tomllib.loads((ENV / "scenario.toml").read_text())["agent"]
    command = [part.replace("{envdir}", str(ENV)) for part in agent["acp"]]
    return command, dict(agent["env"])


def test_a_write_gemini_cli_never_asked_for_stops_a_denying_run(tmp_path: Path) -> None:
    """In `yolo` Gemini CLI runs its shell without asking: a `sed -i` on calc.py is a change
    no approved call explains. `loopdeck acp` on a folder in place, so the file is read after."""
    workdir = tmp_path / "repo"
    workdir.mkdir()
    (workdir / "calc.py").write_text((ENV / "workspace" / "calc.py").read_text())
    script: list[Step] = [shell("sed -i 's/a - b/a + b/' calc.py"), Text("Fixed it with sed.")]
    with GeminiLoopback(script) as api:
        scratch = scratch_for(tmp_path, api)
        command, agent_env = agent_command()
        flags = [f"--env={name}={value}" for name, value in agent_env.items()]
        done = loopdeck(
            "acp", "--goal", "Make calc.add add: fix calc.py.", "--workdir", str(workdir),
            "--check", f"{sys.executable} {ENV / 'check_goal.py'}", "--mode", "yolo", *flags,
            "--headless", "--json", "--approve", "deny", "--db", str(scratch.db),
            "--", *[part.replace("{python}", sys.executable) for part in command],
            environ=scratch.environ(),
        )  # fmt: skip
        assert done.stdout.strip(), done.stderr
        outcome = last_json(done.stdout)
    why = said(scratch, api, outcome)
    assert api.problems() == [], why
    assert agent_requests(scratch, "session/request_permission") == [], why  # yolo: none asked
    assert "a + b" in (workdir / "calc.py").read_text()  # the agent's own shell wrote it
    assert outcome["stop_reason"] == "policy_block", why
    assert "calc.py" in outcome["detail"], why
    found = events(outcome["run_id"], scratch.db)
    [unrequested] = kinds(found, "unrequested_change")
    assert unrequested["changed"] == ["calc.py"] and unrequested["stops"] is True, why
    assert agent_processes(scratch.home) == []


@pytest.mark.parametrize(
    ("how", "stop_reason"), [("cancel", "cancelled"), ("cancel --now", "killed")]
)
def test_a_stop_leaves_no_process_of_gemini_cli(tmp_path: Path, how: str, stop_reason: str) -> None:
    """Gemini CLI's shell starts a daemon in a session of its own (`setsid … &`), then its
    model never answers; the run is stopped from the CLI: no process of the agent is left."""
    script: list[Step] = [shell(DAEMON)]
    with GeminiLoopback(script) as api:
        api.hang_from = 1
        scratch = scratch_for(tmp_path, api)
        with running(ENV, scratch, "auto") as runner:
            run_id = runner.run_id()
            wait_until("the model asked after the shell", lambda: api.hanging.is_set() or None)
            seen = processes_said(agent_processes(scratch.home))
            told = json.dumps(api.main_requests()[-1].body["contents"][-1])[:600]
            assert daemons(scratch.home, "sleep 6131"), (
                f"the shell started no daemon (agent: {seen}; its model told: {told})"
                + said(scratch, api)
            )
            done = loopdeck(*how.split(), run_id, "--db", str(scratch.db), timeout=60)
            assert done.returncode == 0, done.stderr
            outcome = runner.outcome(timeout=RUN_TIMEOUT_S)
            left = gone_or_left(scratch.home)
    why = said(scratch, api, outcome) + f"\nleft: {processes_said(left)}"
    assert outcome["stop_reason"] == stop_reason, why
    assert left == [], why
    end_survivors(scratch.home)
