"""A `[mcp] snapshot` entry the server fails stops the run `tool_failure` naming the entry and
what the server said (its words, and its stderr's tail: the SDK's server keeps a crash's
words there), never `crashed` with loopdeck's own file and line; a hanging entry is bounded by
its own timeout; a resource the server neither lists nor serves refuses the run before it
starts. The server is `tests/mcp_state_server.py`, in an env written for each test."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from loopdeck.core.scenario import ScenarioError
from loopdeck.core.states import StopReason
from loopdeck.operator.launch import RunOptions, prepare_run

SERVER = Path(__file__).parent / "mcp_state_server.py"
BOUND_S = 120.0  # a loaded 2-core machine's; each run here ends in seconds when idle


def _env(tmp_path: Path, snapshot: str, extra: str = "") -> Path:
    env = tmp_path / "state_env"
    env.mkdir()
    (env / "scenario.toml").write_text(
        f"""name = "state_env"
goal = "Bring the counter to 2."
model = "scripted"
mode = "react"
goal_check = ["{{python}}", "-c", "import sys; sys.exit(open('count.txt').read() != '2')"]

[mcp]
command = ["{{python}}", "{SERVER}"]
startup_timeout_s = 60
snapshot = [{snapshot}]
{extra}
[scripts.solve]
[[scripts.solve.executor]]
tool = "bump"
args = {{ by = 2 }}
[[scripts.solve.executor]]
final = "Done."
""",
        encoding="utf-8",
    )
    return env


async def _run(env: Path) -> Any:
    prepared = prepare_run(RunOptions(env=str(env), script="solve", approve="auto"))
    try:
        return await asyncio.wait_for(prepared.runtime.run(), BOUND_S)
    finally:
        prepared.cleanup()


def _named_and_not_crashed(outcome: Any, entry: str) -> None:
    assert outcome.stop_reason is StopReason.TOOL_FAILURE, outcome.detail
    assert outcome.detail.startswith(f"[mcp] snapshot entry 1 ({entry}) failed: MCP server `")
    assert f"{SERVER}`" in outcome.detail
    assert ".py:" not in outcome.detail.split("stderr:")[0]  # no loopdeck file and line
    assert outcome.calls == []  # the first look failed: nothing ran


async def test_a_snapshot_tool_that_raises_is_named_with_the_servers_words(
    tmp_path: Path,
) -> None:
    outcome = await _run(_env(tmp_path, '{ tool = "read_state" }'))
    _named_and_not_crashed(outcome, 'tool = "read_state"')
    # All the SDK's server sends of a crash; its traceback is on the server's stderr, whose
    # tail follows.
    assert "said: Error executing tool read_state; stderr: " in outcome.detail
    assert "results.py" not in outcome.detail


async def test_a_snapshot_tool_that_refuses_is_named_with_its_words(tmp_path: Path) -> None:
    outcome = await _run(_env(tmp_path, '{ tool = "refuse_state" }'))
    _named_and_not_crashed(outcome, 'tool = "refuse_state"')
    assert "said: Error executing tool refuse_state: state is not available: maintenance" in (
        outcome.detail
    )


@pytest.mark.parametrize(
    ("snapshot", "extra"),
    [
        ('{ tool = "slow_state", args = { seconds = 300 }, timeout_s = 1 }', ""),
        (
            '{ tool = "slow_state", args = { seconds = 300 } }',
            "[mcp.tools.slow_state]\ntimeout_s = 1",
        ),
    ],
    ids=["entry", "tool"],
)
async def test_a_hanging_snapshot_tool_is_bounded_by_its_own_timeout(
    tmp_path: Path, snapshot: str, extra: str
) -> None:
    outcome = await _run(_env(tmp_path, snapshot, extra))
    _named_and_not_crashed(outcome, 'tool = "slow_state"')
    assert "gave no answer within 1s" in outcome.detail


def test_a_resource_the_server_does_not_have_refuses_the_run_before_it_starts(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path, '{ resource = "state://count" }, { resource = "nothing://here" }')
    with pytest.raises(ScenarioError) as refused:
        prepare_run(RunOptions(env=str(env), script="solve", approve="auto"))
    said = str(refused.value)
    assert '[mcp] snapshot entry 2 (resource = "nothing://here"): the server cannot read it' in said
    assert "Unknown resource: nothing://here" in said
    assert said.endswith("it lists state://count")


def test_the_cli_refuses_an_unknown_resource_with_exit_2(tmp_path: Path) -> None:
    import subprocess

    env = _env(tmp_path, '{ resource = "nothing://here" }')
    done = subprocess.run(
        [sys.executable, "-m", "loopdeck", "run", str(env), "--script", "solve", "--headless",
         "--approve", "auto", "--db", str(tmp_path / "s.db")],
        capture_output=True, text=True, timeout=BOUND_S, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert '(resource = "nothing://here"): the server cannot read it' in done.stderr


async def test_a_resource_a_template_serves_is_taken(tmp_path: Path) -> None:
    outcome = await _run(_env(tmp_path, '{ resource = "state://item/widgets" }'))
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
