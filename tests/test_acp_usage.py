"""An ACP turn's usage as the run counts it: ACP says a turn's thought tokens (`thoughtTokens`:
Gemini's thinking, a reasoning model's) apart from its output, and its total sums them all, so
the completion's tokens are its output and its thoughts, never its output alone (the thoughts
were spent as the model's writing, not read as its prompt). Driven on `AcpLoop` directly: a
run's runtime, no agent process."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from acp.schema import PromptResponse, Usage
from conftest import SAMPLES, Recorder

from loopdeck.acp_env.config import AgentConfig
from loopdeck.acp_env.loop import AcpLoop
from loopdeck.acp_env.opening import AgentsOwnModel
from loopdeck.acp_env.workspace import WorkspaceEnvironment
from loopdeck.core.approvals import AutoApprover
from loopdeck.core.config import RunConfig
from loopdeck.core.events import EventBus, ModelCalled
from loopdeck.core.run_host import RunHost
from loopdeck.core.runtime import Runtime


def _turn_counted(tmp_path: Path, usage: Usage) -> ModelCalled:
    """The `ModelCalled` of one turn that answered with `usage`."""
    workdir = tmp_path / "work"
    shutil.copytree(SAMPLES / "calc_acp" / "workspace", workdir)
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    config = RunConfig(env="usage", model="acp usage", goal="fix add", mode="react")
    rt = Runtime(config, WorkspaceEnvironment(workdir, {}), AgentsOwnModel("usage"),
                 AutoApprover(), bus=bus)  # fmt: skip
    try:
        loop = AcpLoop(RunHost(rt), None, AgentConfig(acp=["agent"]))  # type: ignore[arg-type]
        loop._usage_of(PromptResponse(stop_reason="end_turn", usage=usage))
        loop._turn_done(time.perf_counter())
    finally:
        rt.env_thread.close()
    [called] = recorder.kinds("model_called")
    assert isinstance(called, ModelCalled)
    return called


@pytest.mark.parametrize(
    ("thought", "completion"),
    [(None, 20), (0, 20), (35, 55)],
)
def test_the_completions_tokens_are_the_output_and_the_thoughts(
    tmp_path: Path, thought: int | None, completion: int
) -> None:
    total = 100 + 20 + (thought or 0)
    usage = Usage(total_tokens=total, input_tokens=100, output_tokens=20, thought_tokens=thought)
    called = _turn_counted(tmp_path, usage)
    assert (called.prompt_tokens, called.completion_tokens) == (100, completion)
    assert not called.tokens_unknown


def test_figures_past_the_total_are_read_as_all_spent_none_twice(tmp_path: Path) -> None:
    usage = Usage(total_tokens=50, input_tokens=10, output_tokens=30, thought_tokens=40)
    called = _turn_counted(tmp_path, usage)
    assert (called.prompt_tokens, called.completion_tokens) == (0, 50)
