"""Codex under loopdeck, offline (issue 36): npm `@agentclientprotocol/codex-acp@2.6.0` (its
dependency `@openai/codex` 0.166 brings the `codex` binary as the npm package
`@openai/codex-linux-x64`: nothing downloaded from elsewhere), started as `codex-acp` (through
`acp_trace.py`, which keeps every ACP message); the adapter runs `codex app-server`. Its model
is a loopback OpenAI Responses API playing a script (`openai_loopback.py`): `CODEX_CONFIG` (JSON
the adapter hands Codex as `-c` overrides) names a custom provider at the loopback's URL with
`wire_api = "responses"`, and the model "gpt-5.5" (Codex offers `apply_patch` only to models it
knows; for an unknown name it sends `exec_command` alone). `CODEX_HOME` and HOME are scratch.
Env: `envs/calc_codex`. Every request body Codex sends is checked as the API would (each
function_call_output and custom_tool_call_output answering a call of the same call_id).

What Codex does over ACP (the trace): modes `read-only` (asks before editing), `workspace-write`,
`agent` (its default, "Auto review": edits without asking) and `agent-full-access`; a tool call
never carries `rawInput`: an edit (`apply_patch`) is `tool_call` in_progress "Editing files"
with the diff hunks, then a permission request for the same call titled "Edit files" with only
its locations; a command (`exec_command`) is `tool_call` in_progress with a title ("Read file
'…'" for a `cat`), its locations and `name`, its output in `_meta.terminal_output_delta`;
permission options `allow_once`, `allow_for_session` (allow_always), `cancel` (reject_once);
Codex writes files itself (no `fs/write_text_file`) and runs commands itself (not loopdeck's
terminals); `usage_update` after each model request, `used` the context window's tokens (not
the total spent), `size` the window; the prompt response's `usage` is the turn's total.

Needs node and npx (the packages are fetched into npm's cache the first time, about 450 MB).
"""

from __future__ import annotations

import json
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
from openai_loopback import Call, OpenAILoopback, Step, Text

PACKAGE = "@agentclientprotocol/codex-acp@2.6.0"
ENV = ENVS / "calc_codex"
DAEMON = "trap '' HUP; setsid sleep 6133 >/dev/null 2>&1 </dev/null &"

pytestmark = [pytest.mark.slow, NEEDS_NPX]  # each run starts Codex: 5-15 s


def patch(old: str, new: str) -> Call:
    body = f"*** Begin Patch\n*** Update File: calc.py\n@@\n def add(a, b):\n-{old}\n+{new}\n"
    return Call("apply_patch", body + "*** End Patch\n")


FIX = patch("    return a - b", "    return a + b")
CAT = Call("exec_command", {"cmd": "cat calc.py"}, "Let me read calc.py.")


def command(cmd: str) -> Call:
    return Call("exec_command", {"cmd": cmd})


def test_an_approved_edit_lands_once_and_the_goal_is_met(tmp_path: Path) -> None:
    with OpenAILoopback([CAT, FIX, Text("Fixed add in calc.py.")]) as api:
        scratch = Scratch(tmp_path, api.url)
        outcome = run_headless(ENV, scratch, "auto")
    why = said(scratch, api, outcome)
    assert outcome["stop_reason"] == "goal_met", why
    assert api.problems() == [], why
    found = events(outcome["run_id"], scratch.db)
    [asked] = kinds(found, "approval_requested")
    # No rawInput: the approval is bound to what Codex showed, the patch's hunk.
    [diff] = asked["args"]["diffs"]
    assert diff["path"] == "calc.py" and "return a + b" in diff["new_text"], why
    [decided] = kinds(found, "approval_decided")
    assert decided["call_id"] == asked["call_id"] and decided["approved"] is True
    assert statuses(found)[asked["call_id"]] == "executed", why
    assert permission_answers(scratch) == ["allow_once"], why
    assert agent_requests(scratch, "fs/write_text_file") == [], why  # Codex writes itself
    [verdict] = kinds(found, "review_verdict")
    assert verdict["verdict"] == "pass" and verdict["before_hash"] != verdict["after_hash"]
    assert kinds(found, "unrequested_change") == [], why
    # The patch ran once: Codex told its model it succeeded, once.
    outputs = [
        item
        for item in api.main_requests()[-1].body["input"]
        if item.get("type") == "custom_tool_call_output"
    ]
    assert len(outputs) == 1 and "Success" in str(outputs[0]["output"]), why
    assert agent_processes(scratch.home) == []


def test_a_denied_edit_never_lands(tmp_path: Path) -> None:
    script: list[Step] = [CAT, FIX, Text("I was not allowed to edit calc.py.")]
    with OpenAILoopback(script) as api:
        scratch = Scratch(tmp_path, api.url)
        outcome = run_headless(ENV, scratch, "deny")
    why = said(scratch, api, outcome)
    assert outcome["stop_reason"] == "stalled", why
    assert api.problems() == [], why
    found = events(outcome["run_id"], scratch.db)
    [decided] = kinds(found, "approval_decided")
    assert decided["approved"] is False
    assert statuses(found)[decided["call_id"]] == "rejected", why
    [verdict] = kinds(found, "review_verdict")
    assert verdict["before_hash"] == verdict["after_hash"], why
    assert any("calc.add(2, 3) is -1" in line for line in outcome["findings"]), why
    assert permission_answers(scratch) == ["cancel"], why
    # Codex ends its turn at a rejection ("No, and tell Codex what to do differently"): the
    # turn is cancelled and its model is not asked again.
    assert turn_ends(scratch) == ["cancelled"], why
    assert len(api.main_requests()) == 2, why  # the cat, the patch: nothing after the refusal
    assert agent_processes(scratch.home) == []


def turn_ends(scratch: Scratch) -> list[str]:
    """The stop reasons of the agent's answers to its prompts."""
    return [
        str(e["msg"]["result"]["stopReason"])
        for e in scratch.messages()
        if e["dir"] == "from_agent" and "stopReason" in (e["msg"].get("result") or {})
    ]


def test_two_different_writes_to_one_file_are_two_keys(tmp_path: Path) -> None:
    """Codex ends its turn at a rejection, so a second write from an unchanged state comes only
    after an approved write that changed nothing: a patch whose hunk puts back the same line
    (the file's content, so the state, unchanged), then the fix. Codex shows no diff for the
    first: it is keyed on its title alone."""
    noop = patch("    return a - b", "    return a - b")
    script: list[Step] = [noop, FIX, Text("Fixed add in calc.py.")]
    with OpenAILoopback(script) as api:
        scratch = Scratch(tmp_path, api.url)
        outcome = run_headless(ENV, scratch, "auto")
    why = said(scratch, api, outcome)
    assert api.problems() == [], why
    found = events(outcome["run_id"], scratch.db)
    proposed = [e for e in kinds(found, "call_proposed") if e["tool"].startswith("edit:")]
    assert len(proposed) == 2, why
    assert proposed[0]["state_hash"] == proposed[1]["state_hash"], why
    assert proposed[0]["fingerprint"] != proposed[1]["fingerprint"], why
    assert kinds(found, "guard_tripped") == [], why
    assert [statuses(found)[e["call_id"]] for e in proposed] == ["executed", "executed"], why
    assert outcome["stop_reason"] == "goal_met", why


def test_identical_reads_from_one_state_are_one_key(tmp_path: Path) -> None:
    script: list[Step] = [CAT, CAT, Text("Read it twice.")]
    with OpenAILoopback(script) as api:
        scratch = Scratch(tmp_path, api.url)
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


def test_an_edit_of_codexs_own_call_is_refused(tmp_path: Path) -> None:
    script: list[Step] = [FIX, Text("I was not allowed to edit calc.py.")]
    with OpenAILoopback(script) as api:
        scratch = Scratch(tmp_path, api.url)
        db = ("--db", str(scratch.db))
        with running(ENV, scratch, "wait") as runner:
            run_id = runner.run_id()
            call = pending_call(scratch, run_id, runner)["call_id"]
            edit = {"input": "*** Begin Patch\n*** Delete File: calc.py\n*** End Patch\n"}
            refused = loopdeck("approve", run_id, call, "--args", json.dumps(edit), *db)
            still = loopdeck("pending", "--json", *db)
            rejected = loopdeck("reject", run_id, call, "--reason", "not now", *db)
            outcome = runner.outcome()
    why = said(scratch, api, outcome) + f"\napprove --args said: {refused.stderr}{refused.stdout}"
    assert refused.returncode != 0, why
    assert "runs its own input" in refused.stderr, why
    assert call in [p["call_id"] for p in json.loads(still.stdout)], why
    assert rejected.returncode == 0, rejected.stderr
    found = events(outcome["run_id"], scratch.db)
    [decided] = kinds(found, "approval_decided")
    assert decided["approved"] is False and decided.get("args") is None, why
    assert outcome["stop_reason"] == "stalled", why
    assert agent_processes(scratch.home) == []


def test_a_write_codex_never_asked_for_stops_a_denying_run(tmp_path: Path) -> None:
    """In its default mode (`agent`, "Auto review") Codex runs `sed -i` on calc.py without
    asking: a change no approved call explains."""
    script: list[Step] = [command("sed -i 's/a - b/a + b/' calc.py"), Text("Fixed it with sed.")]
    with OpenAILoopback(script) as api:
        scratch = Scratch(tmp_path, api.url)
        outcome = run_headless(ENV, scratch, "deny", "--set", 'agent.mode="agent"')
    why = said(scratch, api, outcome)
    assert api.problems() == [], why
    assert agent_requests(scratch, "session/request_permission") == [], why
    assert outcome["stop_reason"] == "policy_block", why
    assert "calc.py" in outcome["detail"], why
    found = events(outcome["run_id"], scratch.db)
    [unrequested] = kinds(found, "unrequested_change")
    assert unrequested["changed"] == ["calc.py"] and unrequested["stops"] is True, why
    assert agent_processes(scratch.home) == []


def test_codex_usage_is_the_window_and_the_turn(tmp_path: Path) -> None:
    """Codex's `usage_update.used` is the context window's tokens after each model request
    (here 150 each time: the loopback reports 120 in, 30 out), not what the run spent; the
    prompt response's `usage` is the turn's total (300 over two requests)."""
    with OpenAILoopback([CAT, Text("Read it.")]) as api:
        scratch = Scratch(tmp_path, api.url)
        outcome = run_headless(ENV, scratch, "auto")
    why = said(scratch, api, outcome)
    used = [u["used"] for u in agent_updates(scratch, "usage_update")]
    assert used and set(used) == {150}, why
    assert outcome["tokens"] == 300, why  # spent over the turn's two requests, not the window


@pytest.mark.parametrize(
    ("how", "stop_reason"), [("cancel", "cancelled"), ("cancel --now", "killed")]
)
def test_a_stop_leaves_no_process_of_codex(tmp_path: Path, how: str, stop_reason: str) -> None:
    """Mode `agent-full-access`: in its sandboxed modes Codex ends a command's daemon itself
    (the sandbox's process namespace goes with the command); without the sandbox the daemon
    outlives the command, and only loopdeck can end it."""
    script: list[Step] = [command(DAEMON)]
    with OpenAILoopback(script) as api:
        api.hang_from = 1
        scratch = Scratch(tmp_path, api.url)
        full = ("--set", 'agent.mode="agent-full-access"')
        with running(ENV, scratch, "auto", *full) as runner:
            run_id = runner.run_id()
            wait_until("the model asked after the command", lambda: api.hanging.is_set() or None)
            seen = processes_said(agent_processes(scratch.home))
            assert daemons(scratch.home, "sleep 6133"), f"no daemon (agent: {seen})" + said(
                scratch, api
            )
            done = loopdeck(*how.split(), run_id, "--db", str(scratch.db), timeout=60)
            assert done.returncode == 0, done.stderr
            outcome = runner.outcome(timeout=RUN_TIMEOUT_S)
            left = gone_or_left(scratch.home)
    why = said(scratch, api, outcome) + f"\nleft: {processes_said(left)}"
    assert outcome["stop_reason"] == stop_reason, why
    assert left == [], why
    end_survivors(scratch.home)
