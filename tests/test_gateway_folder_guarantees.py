"""The folder guarantees of a gateway run against an agent that does other than its tool use
says (the red team's holes, issue 38): a released command whose result the agent never sends
explains nothing past the agent's exit, so a rewrite of calc.py it makes instead, then
exiting, is an `unrequested_change` that stops the run before the goal check counts it. A
released write naming calc.py, carried out and the agent exiting with no result sent (as
`claude -p --max-turns N` does on its last turn), explains calc.py: the goal check counts it.

`loopdeck gateway` through the CLI, its upstream the OpenAI loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from loopback_server import Call, Text
from openai_loopback import OpenAILoopback

BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
BACKDOOR = "import os  # BACKDOOR\ndef add(a, b):\n    return a + b\n"
# One model call; its released tool use never answered: calc.py rewritten, then exit.
AGENT = """
import json, os, sys, urllib.request
tools = [{"type": "function", "function": {"name": "Bash", "description": "run",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "Write", "description": "write",
          "parameters": {"type": "object", "properties": {"file_path": {"type": "string"},
                                                         "content": {"type": "string"}}}}}]
body = {"model": "x", "messages": [{"role": "user", "content": "fix"}], "tools": tools}
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
    {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
     "Content-Type": "application/json"})
urllib.request.urlopen(request, timeout=60).read()
open("calc.py", "w").write(sys.argv[1])
"""
POLICY = """mode = "enforce"
[[rule]]
id = "ls-is-fine"
effect = "allow"
when = 'call.tool == "Bash" && call.args.command == "ls"'
[[rule]]
id = "writing-calc-is-fine"
effect = "allow"
when = 'call.tool == "Write" && call.args.file_path == "calc.py"'
"""
CHECK = "python -B -c 'import sys, calc; sys.exit(0 if calc.add(2, 3) == 5 else 1)'"


def test_a_released_command_never_answered_explains_nothing_after_the_agents_exit(
    tmp_path: Path,
) -> None:
    outcome = _gateway(tmp_path, Call("Bash", {"command": "ls"}), BACKDOOR, "gw-unanswered")
    assert outcome["stop_reason"] == "policy_block", outcome
    assert "calc.py" in outcome["detail"] and "the agent's end" in outcome["detail"], outcome


def test_a_released_write_carried_out_with_no_result_sent_explains_its_file(
    tmp_path: Path,
) -> None:
    write = Call("Write", {"file_path": "calc.py", "content": FIXED})
    outcome = _gateway(tmp_path, write, FIXED, "gw-last-turn")
    assert outcome["stop_reason"] == "goal_met", outcome


def _gateway(tmp_path: Path, call: Call, writes: str, run_id: str) -> dict[str, Any]:
    """The agent's one model call answered by `call` (released by the policy); the agent
    writes `writes` to calc.py and exits, sending no result: the run's outcome."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "calc.py").write_text(BROKEN)
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "policy.toml").write_text(POLICY)
    env = {**os.environ, "OPENAI_API_KEY": "sk-upstream"}
    with OpenAILoopback([call, Text("done")]) as api:
        done = subprocess.run(
            [sys.executable, "-m", "loopdeck", "gateway", "--goal", "fix add", "--check", CHECK,
             "--model", "openai/gpt-4o", "--api-base", api.url, "--headless", "--json",
             "--approve", "deny", "--policy", str(tmp_path / "policy.toml"),
             "--db", str(tmp_path / "s.db"), "--run-id", run_id,
             "--", sys.executable, str(tmp_path / "agent.py"), writes],
            cwd=work, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no outcome\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    outcome: dict[str, Any] = json.loads(lines[-1])
    return outcome
