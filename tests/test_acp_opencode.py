"""opencode under loopdeck, offline (issue 36): npm `opencode-ai@1.18.33` (the package ships its
binary as the optional dependency `opencode-linux-x64`: nothing downloaded from elsewhere),
started as `opencode acp` (through `acp_trace.py`, which keeps every ACP message), its model a
loopback OpenAI-compatible chat-completions API playing a script (`openai_loopback.py`): one
custom provider, `@ai-sdk/openai-compatible` (bundled in opencode) at the loopback's URL, given
in `OPENCODE_CONFIG_CONTENT`, with `OPENCODE_DISABLE_MODELS_FETCH` and the other
`OPENCODE_DISABLE_*` variables keeping it off the network, its HOME and XDG folders scratch.
Env: `envs/calc_opencode`. Every request body opencode sends is checked as the API would (roles,
each tool call answered by a tool message with its id).

What opencode 1.18.33 does over ACP (the trace): no ACP session modes (a `configOptions` `mode`
select: build, plan), its permissions from its config (`edit`/`bash` `ask` here; its default
allows everything); a tool call starts `pending` with `rawInput {}` and its input comes in a
`tool_call_update` (in_progress) before any permission is asked; the permission request's
`rawInput` differs from the call's (`{filepath, diff}` for an edit); options `once`
(allow_once), `always` (allow_always), `reject` (reject_once); an allowed edit is written with
`fs/write_text_file` through loopdeck; the shell runs in opencode itself; no `usage_update`:
the prompt response's `usage` is the last model request's, not the turn's.

Needs node and npx (the package is fetched into npm's cache the first time, about 350 MB: the
binary twice, for x64 and x64-baseline).
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
from openai_loopback import Call, Calls, OpenAILoopback, Step, Text

PACKAGE = "opencode-ai@1.18.33"
ENV = ENVS / "calc_opencode"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
DAEMON = "trap '' HUP; setsid sleep 6132 >/dev/null 2>&1 </dev/null &"

pytestmark = [pytest.mark.slow, NEEDS_NPX]  # each run starts opencode: 10-25 s

READ = Call("read", {"filePath": "calc.py"}, "Let me read calc.py.")
FIX = Call(
    "edit", {"filePath": "calc.py", "oldString": "return a - b", "newString": "return a + b"}
)


def write(content: str) -> Call:
    return Call("write", {"filePath": "calc.py", "content": content})


def bash(command: str) -> Call:
    return Call("bash", {"command": command, "description": "as scripted"})


def test_an_approved_edit_lands_once_and_the_goal_is_met(tmp_path: Path) -> None:
    with OpenAILoopback([READ, FIX, Text("Fixed add in calc.py.")]) as api:
        scratch = Scratch(tmp_path, api.url)
        outcome = run_headless(ENV, scratch, "auto")
    why = said(scratch, api, outcome)
    assert outcome["stop_reason"] == "goal_met", why
    assert api.problems() == [], why
    found = events(outcome["run_id"], scratch.db)
    [asked] = kinds(found, "approval_requested")
    # The call's own input (the model's), not the permission's {filepath, diff}.
    assert asked["args"] == FIX.args, why
    assert "\n-    return a - b\n+    return a + b\n" in asked["rationale"], why
    [decided] = kinds(found, "approval_decided")
    assert decided["call_id"] == asked["call_id"] and decided["approved"] is True
    assert statuses(found)[asked["call_id"]] == "executed", why
    assert permission_answers(scratch) == ["once"], why
    writes = agent_requests(scratch, "fs/write_text_file")
    assert [w["content"] for w in writes] == [FIXED], why
    [verdict] = kinds(found, "review_verdict")
    assert verdict["verdict"] == "pass" and verdict["before_hash"] != verdict["after_hash"]
    assert kinds(found, "unrequested_change") == [], why
    assert agent_processes(scratch.home) == []


def test_a_denied_edit_never_lands(tmp_path: Path) -> None:
    script: list[Step] = [READ, FIX, Text("I was not allowed to edit calc.py.")]
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
    assert agent_requests(scratch, "fs/write_text_file") == [], why
    assert permission_answers(scratch) == ["reject"], why
    # opencode fails the call and ends its turn on a rejection, without asking its model again.
    [failed] = [u for u in agent_updates(scratch, "tool_call_update") if u["status"] == "failed"]
    assert "rejected permission" in json.dumps(failed["content"]), why
    assert len(api.main_requests()) == 2, why  # read, edit: nothing after the rejection
    assert agent_processes(scratch.home) == []


def test_two_different_writes_to_one_file_are_two_keys(tmp_path: Path) -> None:
    """Both in one reply (opencode ends its turn at a rejection, so a second write in a reply
    of its own never comes), both denied: one state, two inputs."""
    first = "def add(a, b):\n    return b + a\n"
    both = Calls((write(first), write(FIXED)))
    script: list[Step] = [both, Text("I could not write calc.py.")]
    with OpenAILoopback(script) as api:
        scratch = Scratch(tmp_path, api.url)
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
    assert permission_answers(scratch) == ["reject", "reject"], why
    assert outcome["stop_reason"] == "stalled", why


def test_two_different_commands_from_one_state_are_two_keys(tmp_path: Path) -> None:
    """opencode's shell call starts `pending` with `rawInput {"cwd": …}`, not `{}`; its
    command comes in the next update. Keyed on that first message, every command from one
    state would be one key."""
    script: list[Step] = [bash("cat calc.py"), bash("wc -l calc.py"), Text("Looked.")]
    with OpenAILoopback(script) as api:
        scratch = Scratch(tmp_path, api.url)
        outcome = run_headless(ENV, scratch, "auto")
    why = said(scratch, api, outcome)
    assert api.problems() == [], why
    found = events(outcome["run_id"], scratch.db)
    proposed = [e for e in kinds(found, "call_proposed") if e["tool"].startswith("execute:")]
    assert len(proposed) == 2, why
    assert proposed[0]["state_hash"] == proposed[1]["state_hash"], why
    assert kinds(found, "guard_tripped") == [], why
    assert proposed[0]["fingerprint"] != proposed[1]["fingerprint"], why
    # What the operator approved names the command, not only the folder it runs in.
    asked = kinds(found, "approval_requested")
    assert [a["args"].get("command") for a in asked] == ["cat calc.py", "wc -l calc.py"], why
    assert outcome["stop_reason"] == "stalled", why


def test_identical_reads_from_one_state_are_one_key(tmp_path: Path) -> None:
    script: list[Step] = [READ, READ, Text("Read it twice.")]
    with OpenAILoopback(script) as api:
        scratch = Scratch(tmp_path, api.url)
        outcome = run_headless(ENV, scratch, "auto")
    why = said(scratch, api, outcome)
    assert api.problems() == [], why
    found = events(outcome["run_id"], scratch.db)
    reads = [e for e in kinds(found, "call_proposed") if e["tool"].startswith("read:")]
    assert len(reads) == 2, why
    assert reads[0]["args"] == reads[1]["args"] == READ.args, why
    assert reads[0]["fingerprint"] == reads[1]["fingerprint"], why
    [tripped] = kinds(found, "guard_tripped")
    assert tripped["call_id"] == reads[1]["call_id"], why
    assert statuses(found).get(reads[1]["call_id"]) == "blocked_repeat", why
    assert outcome["stop_reason"] == "no_progress", why
    assert agent_processes(scratch.home) == []


def test_an_edit_of_opencodes_own_call_is_refused(tmp_path: Path) -> None:
    script: list[Step] = [FIX, Text("I was not allowed to edit calc.py.")]
    with OpenAILoopback(script) as api:
        scratch = Scratch(tmp_path, api.url)
        db = ("--db", str(scratch.db))
        with running(ENV, scratch, "wait") as runner:
            run_id = runner.run_id()
            call = pending_call(scratch, run_id, runner)["call_id"]
            edit = {**FIX.args, "newString": "return b + a"}
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
    assert agent_requests(scratch, "fs/write_text_file") == [], why
    assert outcome["stop_reason"] == "stalled", why
    assert agent_processes(scratch.home) == []


ALLOW_BASH = 'agent.env.OPENCODE_PERMISSION=\'{"edit": "ask", "bash": "allow"}\''


def test_a_write_opencode_never_asked_for_stops_a_denying_run(tmp_path: Path) -> None:
    """With `bash` allowed in its config, opencode runs `sed -i` on calc.py without asking: a
    change no approved call explains."""
    script: list[Step] = [bash("sed -i 's/a - b/a + b/' calc.py"), Text("Fixed it with sed.")]
    with OpenAILoopback(script) as api:
        scratch = Scratch(tmp_path, api.url)
        outcome = run_headless(ENV, scratch, "deny", "--set", ALLOW_BASH)
    why = said(scratch, api, outcome)
    assert api.problems() == [], why
    assert agent_requests(scratch, "session/request_permission") == [], why
    assert outcome["stop_reason"] == "policy_block", why
    assert "calc.py" in outcome["detail"], why
    found = events(outcome["run_id"], scratch.db)
    [unrequested] = kinds(found, "unrequested_change")
    assert unrequested["changed"] == ["calc.py"] and unrequested["stops"] is True, why
    assert kinds(found, "review_verdict") == [], why  # stopped before a goal check saw it
    assert agent_processes(scratch.home) == []


@pytest.mark.parametrize(
    ("how", "stop_reason"), [("cancel", "cancelled"), ("cancel --now", "killed")]
)
def test_a_stop_leaves_no_process_of_opencode(tmp_path: Path, how: str, stop_reason: str) -> None:
    script: list[Step] = [bash(DAEMON)]
    with OpenAILoopback(script) as api:
        api.hang_from = 1
        scratch = Scratch(tmp_path, api.url)
        with running(ENV, scratch, "auto") as runner:
            run_id = runner.run_id()
            wait_until("the model asked after the shell", lambda: api.hanging.is_set() or None)
            seen = processes_said(agent_processes(scratch.home))
            assert daemons(scratch.home, "sleep 6132"), f"no daemon (agent: {seen})" + said(
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
