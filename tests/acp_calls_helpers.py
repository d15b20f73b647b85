"""`AcpCalls` driven directly, as an agent's session updates and permission requests reach
it: a run's runtime on a copy of calc_acp's workspace, an agent that only counts cancels, and
the events recorded (`test_acp_late_input.py`, `test_acp_call_keys.py`)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from acp.schema import PermissionOption, ToolCallProgress
from conftest import SAMPLES, Recorder

from loopdeck.acp_env.bridge import Bridge
from loopdeck.acp_env.calls import AcpCalls
from loopdeck.acp_env.opening import AgentsOwnModel
from loopdeck.acp_env.workspace import WorkspaceEnvironment
from loopdeck.core.approvals import AutoApprover
from loopdeck.core.config import RunConfig
from loopdeck.core.events import EventBus
from loopdeck.core.run_host import RunHost
from loopdeck.core.runtime import Runtime
from loopdeck.core.states import RunState

OPTIONS = [
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]


class Conn:
    def __init__(self) -> None:
        self.cancelled = 0

    async def cancel(self, session_id: str) -> None:
        self.cancelled += 1


class Agent:
    """The agent's process as `AcpCalls` sees it: a session and a connection to cancel on."""

    def __init__(self) -> None:
        self.session_id = "s1"
        self.conn = Conn()


def acp_calls(tmp_path: Path, name: str) -> Iterator[Any]:
    """A fixture's body: the calls of a run in its agent's turn, its events in `.recorder`."""
    workdir = tmp_path / "work"
    shutil.copytree(SAMPLES / "calc_acp" / "workspace", workdir)
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    config = RunConfig(env=name, model=f"acp {name}", goal="fix add", mode="react")
    workspace = WorkspaceEnvironment(workdir, {})
    rt = Runtime(config, workspace, AgentsOwnModel(name), AutoApprover(), bus=bus)
    rt.move(RunState.DECIDING)  # as in the agent's turn
    agent: Any = Agent()
    calls = AcpCalls(RunHost(rt), agent, Bridge(workdir), shown_calls=workspace.shown_calls)
    calls.recorder = recorder  # type: ignore[attr-defined]
    try:
        yield calls
    finally:
        rt.env_thread.close()


def kinds(calls: Any, kind: str) -> list[Any]:
    return list(calls.recorder.kinds(kind))


def update(call_id: str, **fields: Any) -> ToolCallProgress:
    return ToolCallProgress(session_update="tool_call_update", tool_call_id=call_id, **fields)
