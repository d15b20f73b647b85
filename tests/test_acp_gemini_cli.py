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
    STOPS,
    Played,
    Scratch,
    agent_requests,
    agent_updates,
    approved_edit_landed,
    denied_edit_stalled,
    last_json,
    loopdeck,
    one_key,
    own_call_edit_refused,
    play,
    stop_leaves_no_process,
    two_keys,
    unasked_write_stopped,
)
from gemini_loopback import Call, GeminiLoopback, Text

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


def test_an_approved_edit_lands_once_and_the_goal_is_met(tmp_path: Path) -> None:
    run = play(ENV, tmp_path, GeminiLoopback([read(), FIX, Text("Fixed add in calc.py.")]), "auto")
    asked, why = approved_edit_landed(run), run.why
    # No rawInput: the approval is bound to what Gemini CLI shows, the file and its diff.
    assert asked["args"].get("locations") == ["calc.py"], why
    [diff] = asked["args"]["diffs"]
    assert diff["path"] == "calc.py" and diff["new_text"] == FIXED, why
    assert "\n-    return a - b\n+    return a + b\n" in asked["rationale"], why
    # Gemini CLI asks loopdeck to write the file: once, the whole fixed file.
    writes = agent_requests(run.scratch, "fs/write_text_file")
    assert [w["content"] for w in writes] == [FIXED], why
    # The content the permission showed was told: the file checked against it when the call
    # ended (no finding says it went unchecked), and written unasked (no write of its own asked).
    assert not [f for f in run.outcome["findings"] if "unchecked" in f], why
    assert not [c for c in run.outcome["calls"] if c["tool"].startswith("fs_write")], why
    # No usage_update, no `usage` in the prompt's answer (only its `_meta.quota`): the run's
    # tokens are unknown, never 0.
    assert agent_updates(run.scratch, "usage_update") == [], why
    assert run.outcome["tokens"] is None, why


def test_a_denied_edit_never_lands(tmp_path: Path) -> None:
    script = [read(), FIX, Text("I was not allowed to edit calc.py.")]
    run = play(ENV, tmp_path, GeminiLoopback(script), "deny")
    assert run.outcome["stop_reason"] != "goal_met", run.why
    # Gemini CLI was answered with its reject option, and its model told the call was refused.
    denied_edit_stalled(run, "cancel")
    assert agent_requests(run.scratch, "fs/write_text_file") == [], run.why
    # Gemini CLI goes on after a rejection: its model is told the call was cancelled.
    [told] = run.api.main_requests()[-1].body["contents"][-1]["parts"]
    assert "canceled by the user" in told["functionResponse"]["response"]["error"], run.why


def test_two_different_writes_to_one_file_are_two_keys(tmp_path: Path) -> None:
    """Both denied, so the working copy never changes between them: only what the agent shows
    (the diff: Gemini CLI sends no rawInput) can tell them apart."""
    first = "def add(a, b):\n    return b + a\n"
    script = [write(first), write(FIXED), Text("I could not write calc.py.")]
    run = play(ENV, tmp_path, GeminiLoopback(script), "deny")
    two_keys(run, "edit:", "rejected")
    prints = {c["fingerprint"] for c in run.outcome["calls"]}
    assert len(prints) == 2, run.why
    assert run.outcome["stop_reason"] == "stalled", run.why


def test_identical_reads_from_one_state_are_one_key(tmp_path: Path) -> None:
    one_key(play(ENV, tmp_path, GeminiLoopback([read(), read(), Text("Read it twice.")]), "auto"))


def test_an_edit_of_gemini_clis_own_call_is_refused(tmp_path: Path) -> None:
    """`loopdeck approve --args` on a permission Gemini CLI asked: it runs its own input, so
    the edit is refused (exit non-zero, saying so) and nothing is decided; a plain rejection
    then goes through."""
    api = GeminiLoopback([FIX, Text("I was not allowed to edit calc.py.")])
    edit = {"file_path": "calc.py", "old_string": "a - b", "new_string": "b + a"}
    run = own_call_edit_refused(ENV, tmp_path, api, edit)
    assert agent_requests(run.scratch, "fs/write_text_file") == [], run.why


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
    check = f"{sys.executable} {ENV.parent / 'calc_check.py'}"
    script = [shell("sed -i 's/a - b/a + b/' calc.py"), Text("Fixed it with sed.")]
    with GeminiLoopback(script) as api:
        scratch = Scratch(tmp_path, api.url)
        command, agent_env = agent_command()
        flags = [f"--env={name}={value}" for name, value in agent_env.items()]
        done = loopdeck(
            "acp", "--goal", "Make calc.add add: fix calc.py.", "--workdir", str(workdir),
            "--check", check, "--mode", "yolo", *flags,
            "--headless", "--json", "--approve", "deny", "--db", str(scratch.db),
            "--", *[part.replace("{python}", sys.executable) for part in command],
            environ=scratch.environ(),
        )  # fmt: skip
        assert done.stdout.strip(), done.stderr
        run = Played(scratch, api, last_json(done.stdout))
    assert "a + b" in (workdir / "calc.py").read_text()  # the agent's own shell wrote it
    unasked_write_stopped(run)  # yolo: no permission asked


@STOPS
def test_a_stop_leaves_no_process_of_gemini_cli(tmp_path: Path, how: str, stop_reason: str) -> None:
    """Gemini CLI's shell starts a daemon in a session of its own (`setsid … &`), then its
    model never answers; the run is stopped from the CLI: no process of the agent is left."""
    api = GeminiLoopback([shell(DAEMON)])
    stop_leaves_no_process(ENV, tmp_path, api, how, stop_reason, "sleep 6131", told=told)


def told(api: GeminiLoopback) -> str:
    """What Gemini CLI told its model last: the shell's result."""
    return f"; its model told: {json.dumps(api.main_requests()[-1].body['contents'][-1])[:600]}"
