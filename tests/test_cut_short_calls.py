"""A call the run's stop cuts short says how long it ran when that is known, and never a
figure from a clock it never started (an agent's call marked running by its host)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from conftest import SAMPLES, Recorder

from loopdeck.acp_env.opening import AgentsOwnModel
from loopdeck.acp_env.workspace import WorkspaceEnvironment
from loopdeck.core.approvals import AutoApprover
from loopdeck.core.config import RunConfig
from loopdeck.core.events import CallStatus, EventBus
from loopdeck.core.run_host import RunHost
from loopdeck.core.runtime import Runtime
from loopdeck.core.states import RunState


async def test_an_agents_call_cut_short_ran_as_long_as_it_ran(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    shutil.copytree(SAMPLES / "calc_acp" / "workspace", workdir)
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    config = RunConfig(env="a", model="acp a", goal="fix add", mode="react")
    rt = Runtime(config, WorkspaceEnvironment(workdir, {}), AgentsOwnModel("a"), AutoApprover(),
                 bus=bus)  # fmt: skip
    try:
        rt.move(RunState.DECIDING)
        host = RunHost(rt)
        ran, _ = await host.propose("execute", "ls", {"command": "ls"})
        asked, _ = await host.propose("execute", "pwd", {"command": "pwd"})
        began = time.monotonic()
        host.running(ran)
        asked.status = CallStatus.RUNNING  # running by a path that never said when it began
        rt.calls.withdraw_pending("the agent went away")
        [one, two] = list(recorder.kinds("tool_finished"))
        ran_for = (time.monotonic() - began) * 1000  # what it ran for is inside this span
        assert one.status is CallStatus.OUTCOME_UNKNOWN and 0 <= one.duration_ms <= ran_for
        assert "cut short by the run's stop: the agent went away" in one.result["error"]["message"]
        assert two.duration_ms == 0.0  # unknown, never a figure from a clock never started
    finally:
        rt.env_thread.close()
