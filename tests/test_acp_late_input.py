"""An ACP tool call started before its input is known (Claude Code: a generic title,
`rawInput {}`, the input in updates after) is held, not proposed: it is proposed, keyed by the
guard and approved on its whole input once a permission asks for it or it runs or ends.
The fast tests drive `AcpCalls` itself with the SDK's messages; the slow one plays the
scripted agent's `late_input` through a whole run."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from acp.schema import (
    AllowedOutcome,
    FileEditToolCallContent,
    ToolCallLocation,
    ToolCallStart,
    ToolCallUpdate,
)
from acp_calls_helpers import OPTIONS, acp_calls, kinds, update
from conftest import SAMPLES, run_env

from loopdeck.acp_env.call_input import diff_text
from loopdeck.acp_env.calls import AcpCalls
from loopdeck.core.events import CallStatus
from loopdeck.core.states import StopReason


@pytest.fixture
def calls(tmp_path: Path) -> Any:
    yield from acp_calls(tmp_path, "late")


def started(call_id: str, title: str, kind: str) -> ToolCallStart:
    """Claude Code's first word of a call: the model's input has not streamed yet."""
    return ToolCallStart(
        session_update="tool_call", tool_call_id=call_id, title=title, kind=kind,
        status="pending", raw_input={}, content=[], locations=[],
    )  # fmt: skip


def read_of(workdir: Path, name: str) -> dict[str, Any]:
    path = str(workdir / name)
    return {
        "title": f"Read {name}",
        "raw_input": {"file_path": path},
        "locations": [ToolCallLocation(path=path, line=1)],
    }


async def read(calls: AcpCalls, call_id: str, name: str) -> None:
    """A read as Claude Code reports it: started, its input, then completed (no in_progress)."""
    await calls.proposed(started(call_id, "Read File", "read"))
    await calls.progress(update(call_id, **read_of(calls.host.workdir, name)))
    await calls.progress(update(call_id, status="completed", raw_output="1\tdef add(a, b):"))


async def test_a_call_with_no_input_yet_is_held_until_it_ends(calls: Any) -> None:
    workdir = calls.host.workdir
    await calls.proposed(started("t1", "Read File", "read"))
    await calls.progress(update("t1", **read_of(workdir, "calc.py")))
    assert kinds(calls, "call_proposed") == []  # still pending: its input may still grow
    await calls.progress(update("t1", status="completed", raw_output="1\tdef add(a, b):"))
    [proposed] = kinds(calls, "call_proposed")
    assert proposed.tool == "read: Read calc.py"
    assert proposed.args == {"file_path": str(workdir / "calc.py")}
    [finished] = kinds(calls, "tool_finished")
    assert finished.call_id == proposed.call_id and finished.status is CallStatus.EXECUTED
    assert calls.held == {} and calls.unknown_updates == 0


async def test_two_reads_of_different_files_from_one_state_are_no_repeat(calls: Any) -> None:
    await read(calls, "t1", "calc.py")
    await read(calls, "t2", "test_calc.py")
    assert kinds(calls, "guard_tripped") == [] and calls.tripped is None
    assert [e.tool for e in kinds(calls, "call_proposed")] == [
        "read: Read calc.py",
        "read: Read test_calc.py",
    ]


async def test_the_same_read_twice_from_one_state_is_still_a_repeat(calls: Any) -> None:
    await read(calls, "t1", "calc.py")
    await read(calls, "t2", "calc.py")
    [tripped] = kinds(calls, "guard_tripped")
    assert tripped.tool == "read: Read calc.py"
    assert calls.tripped is not None and calls.agent.conn.cancelled == 1
    # The agent says the second read ended: it ran, and is recorded as it ran, never blocked.
    statuses = [e.status for e in kinds(calls, "tool_finished")]
    assert statuses == [CallStatus.EXECUTED, CallStatus.EXECUTED]


def edit_request(workdir: Path) -> ToolCallUpdate:
    path = str(workdir / "calc.py")
    return ToolCallUpdate(
        tool_call_id="t3", title="Edit calc.py", kind="edit", status="pending",
        raw_input={"file_path": path, "old_string": "return a - b",
                   "new_string": "return a + b", "replace_all": False},
        content=[FileEditToolCallContent(type="diff", path=path, old_text="return a - b",
                                         new_text="return a + b")],
        locations=[ToolCallLocation(path=path)],
    )  # fmt: skip


async def test_a_held_edit_is_approved_on_the_permissions_whole_input(calls: Any) -> None:
    workdir = calls.host.workdir
    path = str(workdir / "calc.py")
    await calls.proposed(started("t3", "Edit", "edit"))
    # Input streams in: a partial rawInput, still pending, proposes nothing.
    partial = {"file_path": path, "old_string": "return a - b"}
    await calls.progress(update("t3", title="Edit calc.py", raw_input=partial))
    assert kinds(calls, "call_proposed") == []
    answer = await calls.permission(edit_request(workdir), OPTIONS)
    assert isinstance(answer.outcome, AllowedOutcome) and answer.outcome.option_id == "allow"
    [proposed] = kinds(calls, "call_proposed")
    whole = {**partial, "new_string": "return a + b", "replace_all": False}
    assert proposed.tool == "edit: Edit calc.py" and proposed.args == whole
    [asked] = kinds(calls, "approval_requested")
    assert asked.call_id == proposed.call_id and asked.args == whole
    # Each side of the diff on its own line, though the agent's fragments end in none.
    assert "\n-return a - b\n+return a + b\n" in asked.rationale
    await calls.progress(update("t3", status="completed", raw_output="updated successfully"))
    [finished] = kinds(calls, "tool_finished")
    assert finished.status is CallStatus.EXECUTED
    # What it may write unasked: the file with the diff applied, nothing else
    edited = (workdir / "calc.py").read_text().replace("return a - b", "return a + b")
    assert calls.permitted_writes == {(workdir / "calc.py").resolve(): {edited}}


async def test_a_call_that_runs_or_ends_with_no_input_is_proposed_with_none(calls: Any) -> None:
    await calls.proposed(started("t4", "Terminal", "execute"))
    await calls.progress(update("t4", status="in_progress"))
    [proposed] = kinds(calls, "call_proposed")
    assert proposed.tool == "execute: Terminal" and proposed.args == {}
    await calls.proposed(started("t5", "Task", "other"))
    await calls.progress(update("t5", status="failed"))
    statuses = {e.call_id: e.status for e in kinds(calls, "tool_finished")}
    [_, second] = kinds(calls, "call_proposed")
    assert second.args == {} and statuses == {second.call_id: CallStatus.FAILED}


async def test_a_pending_call_is_held_until_it_runs_even_with_part_of_its_input(
    calls: Any,
) -> None:
    """opencode's shell call starts pending with only its `cwd`; its command comes in the next
    update. Keyed at once, `cat calc.py` and `wc -l calc.py` would be one key, and the
    operator would approve `{cwd}`."""
    for acp_id, command in (("t6", "cat calc.py"), ("t7", "wc -l calc.py")):
        start = started(acp_id, "bash", "execute").model_copy(update={"raw_input": {"cwd": "."}})
        await calls.proposed(start)
        raw = {"command": command, "cwd": "."}
        await calls.progress(update(acp_id, status="in_progress", raw_input=raw))
    first, second = kinds(calls, "call_proposed")
    assert first.args == {"command": "cat calc.py", "cwd": "."}
    assert first.fingerprint != second.fingerprint


async def test_a_call_that_starts_running_with_its_input_is_proposed_at_once(calls: Any) -> None:
    start = started("t8", "Read calc.py", "read").model_copy(
        update={"raw_input": {"path": "calc.py"}, "status": "in_progress"}
    )
    await calls.proposed(start)
    [proposed] = kinds(calls, "call_proposed")
    assert proposed.args == {"path": "calc.py"}
    await calls.progress(update("t9", status="completed"))  # an id it never started
    assert calls.unknown_updates == 1


def test_a_diffs_sides_end_their_lines() -> None:
    item = FileEditToolCallContent(type="diff", path="/w/calc.py", old_text="a", new_text="b")
    said = diff_text(ToolCallUpdate(tool_call_id="t", content=[item]), Path("/w"))
    assert said.splitlines()[-2:] == ["-a", "+b"]


LATE = """
[scripts.late]
expect = { stop_reason = "goal_met" }
[[scripts.late.turns]]
[[scripts.late.turns.steps]]
tool = "Read calc.py"
kind = "read"
input = { path = "calc.py" }
read = "calc.py"
late_input = true
[[scripts.late.turns.steps]]
tool = "Read test_calc.py"
kind = "read"
input = { path = "test_calc.py" }
read = "test_calc.py"
late_input = true
[[scripts.late.turns.steps]]
tool = "Fix add in calc.py"
kind = "edit"
input = { path = "calc.py" }
permission = true
late_input = true
[scripts.late.turns.steps.write]
path = "calc.py"
content = "def add(a, b):\\n    return a + b\\n\\n\\ndef mul(a, b):\\n    return a * b\\n"
"""


@pytest.mark.slow  # an agent process, the SDK's import, pytest as the goal check
async def test_the_scripted_agents_late_input_run_reaches_its_goal(tmp_path: Path) -> None:
    env = tmp_path / "calc_late"
    shutil.copytree(SAMPLES / "calc_acp", env)
    with (env / "scenario.toml").open("a", encoding="utf-8") as scenario:
        scenario.write(LATE)
    outcome, rec = await run_env(env, "late")
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    proposed = [(e.tool, e.args) for e in rec.kinds("call_proposed")]
    assert proposed == [
        ("read: Read calc.py", {"path": "calc.py"}),
        ("read: Read test_calc.py", {"path": "test_calc.py"}),
        ("edit: Fix add in calc.py", {"path": "calc.py"}),
    ]
    [asked] = rec.kinds("approval_requested")
    assert asked.args == {"path": "calc.py"} and "+    return a + b" in asked.rationale
    assert rec.kinds("guard_tripped") == []
