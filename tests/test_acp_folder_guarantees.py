"""The folder guarantees of an ACP run held against `tests/hostile_agent.py` agents that write
where no look sees them (the red team's holes, issue 38): every change the agent makes to the
working copy is a write the operator approved, or an `unrequested_change` that stops the run
before any goal check counts it.

- a write in the agent's start-up (`session/new`) is not the baseline: it stops the run;
- a write timed into the goal check cannot land while the check runs (the agent is held
  still), so it never passes the check as the check's own doing: it lands after the thaw,
  an `unrequested_change`;
- a write made as the agent is stopped (a SIGTERM handler) is looked at after the stop: it
  turns a `goal_met` into `policy_block`;
- a write made while a permitted command runs is named (a finding), never silent.

Real runs (the CLI, the agent's process): marked slow, as `test_acp_hostile.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_agent import TARGET
from test_acp_hostile import RUN_BOUND_S, Runner, of_kind, run_to_end, stop_of

pytestmark = pytest.mark.slow

ALLOW = """mode = "enforce"
[[rule]]
id = "let-{kind}"
effect = "allow"
when = 'call.tool.startsWith("{kind}")'
"""


def policy(tmp: Path, kind: str) -> str:
    path = tmp / f"allow-{kind}.toml"
    path.write_text(ALLOW.format(kind=kind), encoding="utf-8")
    return str(path)


def test_a_write_in_the_agents_start_up_is_unrequested_not_the_baseline(tmp_path: Path) -> None:
    outcome, events = run_to_end(tmp_path, "write-at-start", "deny")
    assert outcome["stop_reason"] == "policy_block", outcome
    changes = of_kind(events, "unrequested_change")
    assert changes and TARGET in changes[0]["changed"], changes
    assert changes[0]["after"] == "the agent's start-up", changes[0]


def test_a_write_timed_into_the_goal_check_never_lands_while_it_runs(tmp_path: Path) -> None:
    # A check that takes a second before it imports calc.py (long enough for the agent's
    # watcher to see it and write the fix, were the agent not held still), leaving a mark
    # the agent writes the fix on once it goes on: after the thaw, an unrequested change.
    marker = tmp_path / "checked"
    slow = (
        "import subprocess, sys, time; time.sleep(1.0); open(sys.argv[2], 'w').close();"
        " sys.exit(subprocess.call([sys.executable, sys.argv[1], 'add']))"
    )
    check = json.dumps(["{python}", "-c", slow, "{envdir}/../calc_check.py", str(marker)])
    runner = Runner(
        tmp_path, "write-during-check", "deny", "--max-rounds", "2",
        "--set", f"goal_check={check}", agent_args=(str(marker),),
    )  # fmt: skip
    try:
        outcome = runner.wait(RUN_BOUND_S, "write-during-check")
    finally:
        runner.stop()
    events = runner.exported()
    assert marker.exists()  # the check ran
    assert outcome["stop_reason"] != "goal_met", outcome
    # The agent's write, after the thaw (a turn's look, or the look after its stop): the
    # agent's change, never the check's.
    changes = of_kind(events, "unrequested_change")
    assert changes and TARGET in changes[0]["changed"], (outcome["detail"], changes)
    assert changes[0]["after"] in ("turn 1", "turn 2", "the agent's stop"), changes[0]
    said = json.dumps(events)
    assert "the goal check after turn 1 changed the working copy" not in said


def test_a_write_at_the_agents_stop_turns_goal_met_into_policy_block(tmp_path: Path) -> None:
    outcome, events = run_to_end(
        tmp_path, "write-at-stop", "deny", "--policy", policy(tmp_path, "edit")
    )
    assert outcome["stop_reason"] == "policy_block", outcome
    assert "the agent's stop" in outcome["detail"], outcome
    changes = of_kind(events, "unrequested_change")
    assert changes and changes[-1]["after"] == "the agent's stop", changes
    assert TARGET in changes[-1]["changed"] and changes[-1]["stops"] is True, changes[-1]
    assert stop_of(events)["stop_reason"] == "policy_block"


def test_a_write_while_a_permitted_command_runs_is_named(tmp_path: Path) -> None:
    allow = policy(tmp_path, "execute")
    outcome, _ = run_to_end(tmp_path, "write-under-command", "deny", "--policy", allow)
    named = [f for f in outcome["findings"] if "changed while" in f]
    assert named and TARGET in named[0] and "ls -la" in named[0], outcome["findings"]
