"""What an exploratory run of real and hostile ACP agents found in how loopdeck records an ACP
agent's turns, played by loopdeck's scripted agent on a tiny env of each test's own:

- what the goal check itself writes in the working copy is the check's, recorded as such,
  never an `unrequested_change` of the agent's;
- a turn's usage keeps its output apart (the completion's tokens); a turn whose model ran
  that reports 0 tokens (opencode's turn cut by a cancel) leaves them unknown, never 0;
- a bare JSON value on the agent's stdout (`42`, `null`, `[1, 2]`, `"str"`) is skipped with a
  warning naming it: the agent is alive and its run goes on;
- an agent gone mid-turn leaves its turn's tokens and cost unknown, never 0.

Each starts the scripted agent (seconds): `slow`.
"""

from __future__ import annotations

import logging
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES, run_env

from loopdeck.core.states import StopReason

pytestmark = pytest.mark.slow

SCENARIO = """
name = "turns"
goal = "Make calc.add add."
mode = "react"
goal_check = {check}

[agent]
acp = ["{{python}}", "-m", "loopdeck.acp_env.scripted_agent", "{{envdir}}/scenario.toml",
       "{{script}}"]
mode = "default"

[budgets]
max_rounds = 2

[scripts.quiet]
[[scripts.quiet.turns]]
steps = [{{ message = "Nothing to change." }}]

[scripts.bare-values]
[[scripts.bare-values.turns]]
steps = [{{ garbage = "42" }}, {{ garbage = "null" }}, {{ garbage = "[1, 2]" }},
         {{ garbage = '"str"' }}, {{ message = "Still here." }}]

[scripts.cut-at-zero]
[[scripts.cut-at-zero.turns]]
steps = [
  {{ usage = {{ used = 10, tokens = 0 }} }},
  {{ tool = "List files", kind = "execute", input = {{ command = "ls" }}, permission = true }},
  {{ tool = "List files", kind = "execute", input = {{ command = "ls" }}, permission = true }},
]
"""
NOT_MET = '["{python}", "-c", "raise SystemExit(1)"]'


def env(tmp_path: Path, check: str = NOT_MET) -> Path:
    folder = tmp_path / "turns"
    shutil.copytree(SAMPLES / "calc_acp" / "workspace", folder / "workspace")
    scenario = textwrap.dedent(SCENARIO).format(check=check)
    (folder / "scenario.toml").write_text(scenario, encoding="utf-8")
    return folder


async def test_what_the_goal_check_writes_is_its_own_never_the_agents(tmp_path: Path) -> None:
    """`--check "sh -c 'date +%N > report.txt; exit 1'"` under `--approve deny`: the check's
    report is no unrequested change; the run ends on its own terms, the report named."""
    check = '["sh", "-c", "date +%N > report.txt; exit 1"]'
    outcome, recorder = await run_env(env(tmp_path, check), "quiet", approve="deny")
    assert outcome.stop_reason is StopReason.STALLED, outcome.detail
    assert recorder.kinds("unrequested_change") == []
    [said] = [f for f in outcome.findings if "goal check after turn 1 changed" in f]
    assert "added report.txt" in said and "not the agent's" in said


async def test_a_turn_cut_at_zero_tokens_after_its_model_ran_leaves_them_unknown(
    tmp_path: Path,
) -> None:
    outcome, recorder = await run_env(env(tmp_path), "cut-at-zero")
    assert outcome.stop_reason is StopReason.NO_PROGRESS, outcome.detail
    [called] = recorder.kinds("model_called")
    assert called.tokens_unknown
    assert outcome.tokens is None


async def test_a_bare_json_value_on_stdout_is_skipped_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="loopdeck.acp"):
        outcome, recorder = await run_env(env(tmp_path), "bare-values")
    assert outcome.stop_reason is StopReason.STALLED, outcome.detail
    assert [e.content for e in recorder.kinds("model_called")] == ["Still here."]
    said = [r.getMessage() for r in caplog.records if r.name == "loopdeck.acp"]
    for line in ("42", "null", "[1, 2]", '"str"'):
        assert any(m.endswith(f"is not a JSON-RPC message, skipped: {line}") for m in said), said


async def test_an_agent_gone_mid_turn_leaves_its_tokens_and_cost_unknown() -> None:
    outcome: Any
    outcome, recorder = await run_env(SAMPLES / "calc_acp", "dies")
    assert outcome.stop_reason is StopReason.TOOL_FAILURE, outcome.detail
    [called] = recorder.kinds("model_called")
    assert called.tokens_unknown and called.cost_usd is None
    assert outcome.tokens is None and outcome.cost_usd is None
