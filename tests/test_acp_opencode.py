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
    STOPS,
    agent_requests,
    agent_updates,
    approved_edit_landed,
    denied_edit_stalled,
    kinds,
    one_key,
    own_call_edit_refused,
    permission_answers,
    play,
    stop_leaves_no_process,
    two_keys,
    unasked_write_stopped,
)
from openai_loopback import Call, Calls, OpenAILoopback, Text

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
    run = play(ENV, tmp_path, OpenAILoopback([READ, FIX, Text("Fixed add in calc.py.")]), "auto")
    asked, why = approved_edit_landed(run), run.why
    # The call's own input (the model's), not the permission's {filepath, diff}.
    assert asked["args"] == FIX.args, why
    assert "\n-    return a - b\n+    return a + b\n" in asked["rationale"], why
    assert permission_answers(run.scratch) == ["once"], why
    writes = agent_requests(run.scratch, "fs/write_text_file")
    assert [w["content"] for w in writes] == [FIXED], why
    # The content the permission showed was told: the file checked against it when the call
    # ended (no finding says it went unchecked), and written unasked (no write of its own asked).
    assert not [f for f in run.outcome["findings"] if "unchecked" in f], why
    assert not [c for c in run.outcome["calls"] if c["tool"].startswith("fs_write")], why


def test_a_denied_edit_never_lands(tmp_path: Path) -> None:
    script = [READ, FIX, Text("I was not allowed to edit calc.py.")]
    run = play(ENV, tmp_path, OpenAILoopback(script), "deny")
    denied_edit_stalled(run, "reject")
    why = run.why
    assert agent_requests(run.scratch, "fs/write_text_file") == [], why
    # opencode fails the call and ends its turn on a rejection, without asking its model again.
    updates = agent_updates(run.scratch, "tool_call_update")
    [failed] = [u for u in updates if u["status"] == "failed"]
    assert "rejected permission" in json.dumps(failed["content"]), why
    assert len(run.api.main_requests()) == 2, why  # read, edit: nothing after the rejection


def test_two_different_writes_to_one_file_are_two_keys(tmp_path: Path) -> None:
    """Both in one reply (opencode ends its turn at a rejection, so a second write in a reply
    of its own never comes), both denied: one state, two inputs."""
    first = "def add(a, b):\n    return b + a\n"
    both = Calls((write(first), write(FIXED)))
    run = play(ENV, tmp_path, OpenAILoopback([both, Text("I could not write calc.py.")]), "deny")
    two_keys(run, "edit:", "rejected")
    assert permission_answers(run.scratch) == ["reject", "reject"], run.why
    assert run.outcome["stop_reason"] == "stalled", run.why


def test_two_different_commands_from_one_state_are_two_keys(tmp_path: Path) -> None:
    """opencode's shell call starts `pending` with `rawInput {"cwd": …}`, not `{}`; its
    command comes in the next update. Keyed on that first message, every command from one
    state would be one key."""
    script = [bash("cat calc.py"), bash("wc -l calc.py"), Text("Looked.")]
    run = play(ENV, tmp_path, OpenAILoopback(script), "auto")
    two_keys(run, "execute:")
    # What the operator approved names the command, not only the folder it runs in.
    asked = kinds(run.found, "approval_requested")
    commands = [a["args"].get("command") for a in asked]
    assert commands == ["cat calc.py", "wc -l calc.py"], run.why
    assert run.outcome["stop_reason"] == "stalled", run.why


def test_identical_reads_from_one_state_are_one_key(tmp_path: Path) -> None:
    run = play(ENV, tmp_path, OpenAILoopback([READ, READ, Text("Read it twice.")]), "auto")
    reads = one_key(run)
    assert reads[0]["args"] == reads[1]["args"] == READ.args, run.why


def test_an_edit_of_opencodes_own_call_is_refused(tmp_path: Path) -> None:
    api = OpenAILoopback([FIX, Text("I was not allowed to edit calc.py.")])
    run = own_call_edit_refused(ENV, tmp_path, api, {**FIX.args, "newString": "return b + a"})
    assert agent_requests(run.scratch, "fs/write_text_file") == [], run.why


ALLOW_BASH = 'agent.env.OPENCODE_PERMISSION=\'{"edit": "ask", "bash": "allow"}\''


def test_a_write_opencode_never_asked_for_stops_a_denying_run(tmp_path: Path) -> None:
    """With `bash` allowed in its config, opencode runs `sed -i` on calc.py without asking: a
    change no approved call explains."""
    api = OpenAILoopback([bash("sed -i 's/a - b/a + b/' calc.py"), Text("Fixed it with sed.")])
    run = play(ENV, tmp_path, api, "deny", "--set", ALLOW_BASH)
    unasked_write_stopped(run)
    assert kinds(run.found, "review_verdict") == [], run.why  # stopped before a goal check


@STOPS
def test_a_stop_leaves_no_process_of_opencode(tmp_path: Path, how: str, stop_reason: str) -> None:
    api = OpenAILoopback([bash(DAEMON)])
    stop_leaves_no_process(ENV, tmp_path, api, how, stop_reason, "sleep 6132")
