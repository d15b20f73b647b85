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

from pathlib import Path

import pytest
from acp_agents import (
    ENVS,
    NEEDS_NPX,
    STOPS,
    Scratch,
    agent_requests,
    agent_updates,
    approved_edit_landed,
    denied_edit_stalled,
    one_key,
    own_call_edit_refused,
    permission_answers,
    play,
    stop_leaves_no_process,
    two_keys,
    unasked_write_stopped,
)
from openai_loopback import Call, OpenAILoopback, Text

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
    run = play(ENV, tmp_path, OpenAILoopback([CAT, FIX, Text("Fixed add in calc.py.")]), "auto")
    asked, why = approved_edit_landed(run), run.why
    # No rawInput: the approval is bound to what Codex showed, the patch's hunk.
    [diff] = asked["args"]["diffs"]
    assert diff["path"] == "calc.py" and "return a + b" in diff["new_text"], why
    assert permission_answers(run.scratch) == ["allow_once"], why
    assert agent_requests(run.scratch, "fs/write_text_file") == [], why  # Codex writes itself
    # The patch ran once: Codex told its model it succeeded, once.
    outputs = [
        item
        for item in run.api.main_requests()[-1].body["input"]
        if item.get("type") == "custom_tool_call_output"
    ]
    assert len(outputs) == 1 and "Success" in str(outputs[0]["output"]), why
    # The content the permission showed was told: the file checked against it when the call
    # ended (no finding says it went unchecked).
    assert not [f for f in run.outcome["findings"] if "unchecked" in f], why


def test_a_denied_edit_never_lands(tmp_path: Path) -> None:
    script = [CAT, FIX, Text("I was not allowed to edit calc.py.")]
    run = play(ENV, tmp_path, OpenAILoopback(script), "deny")
    denied_edit_stalled(run, "cancel")
    # Codex ends its turn at a rejection ("No, and tell Codex what to do differently"): the
    # turn is cancelled and its model is not asked again.
    assert turn_ends(run.scratch) == ["cancelled"], run.why
    # the cat, the patch: nothing after the refusal
    assert len(run.api.main_requests()) == 2, run.why


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
    run = play(ENV, tmp_path, OpenAILoopback([noop, FIX, Text("Fixed add in calc.py.")]), "auto")
    two_keys(run, "edit:", "executed")
    assert run.outcome["stop_reason"] == "goal_met", run.why


def test_identical_reads_from_one_state_are_one_key(tmp_path: Path) -> None:
    one_key(play(ENV, tmp_path, OpenAILoopback([CAT, CAT, Text("Read it twice.")]), "auto"))


def test_an_edit_of_codexs_own_call_is_refused(tmp_path: Path) -> None:
    api = OpenAILoopback([FIX, Text("I was not allowed to edit calc.py.")])
    edit = {"input": "*** Begin Patch\n*** Delete File: calc.py\n*** End Patch\n"}
    own_call_edit_refused(ENV, tmp_path, api, edit)


def test_a_write_codex_never_asked_for_stops_a_denying_run(tmp_path: Path) -> None:
    """In its default mode (`agent`, "Auto review") Codex runs `sed -i` on calc.py without
    asking: a change no approved call explains."""
    api = OpenAILoopback([command("sed -i 's/a - b/a + b/' calc.py"), Text("Fixed it with sed.")])
    unasked_write_stopped(play(ENV, tmp_path, api, "deny", "--set", 'agent.mode="agent"'))


def test_codex_usage_is_the_window_and_the_turn(tmp_path: Path) -> None:
    """Codex's `usage_update.used` is the context window's tokens after each model request
    (here 150 each time: the loopback reports 120 in, 30 out), not what the run spent; the
    prompt response's `usage` is the turn's total (300 over two requests)."""
    run = play(ENV, tmp_path, OpenAILoopback([CAT, Text("Read it.")]), "auto")
    used = [u["used"] for u in agent_updates(run.scratch, "usage_update")]
    assert used and set(used) == {150}, run.why
    # spent over the turn's two requests, not the window
    assert run.outcome["tokens"] == 300, run.why


@STOPS
def test_a_stop_leaves_no_process_of_codex(tmp_path: Path, how: str, stop_reason: str) -> None:
    """Mode `agent-full-access`: in its sandboxed modes Codex ends a command's daemon itself
    (the sandbox's process namespace goes with the command); without the sandbox the daemon
    outlives the command, and only loopdeck can end it."""
    api = OpenAILoopback([command(DAEMON)])
    full = ("--set", 'agent.mode="agent-full-access"')
    stop_leaves_no_process(ENV, tmp_path, api, how, stop_reason, "sleep 6133", *full)
