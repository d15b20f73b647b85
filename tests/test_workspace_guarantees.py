"""The pieces every kind's guarantees stand on, without an agent process: which changes of a
workspace no approved call explains, which input fields an agent renews per call, and an edit
that a call cannot carry out recorded as what happens instead."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import Recorder

from loopdeck.acp_env.call_input import NOTHING_TO_JUDGE, shown_input
from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest
from loopdeck.core.events import ApprovalDecided, EventBus
from loopdeck.core.workspace_changes import ChangeWatch
from loopdeck.operator import kinds
from loopdeck.operator.launch import RunOptions, prepare_run
from loopdeck.workdir.volatile import steady


def files(**hashes: str) -> dict[str, Any]:
    return {"files": {name.replace("_", "."): value for name, value in hashes.items()}}


def test_a_change_no_permit_explains_is_unrequested() -> None:
    watch = ChangeWatch()
    assert not watch.look(files(calc_py="a"))  # the first look only sees
    changed = watch.look(files(calc_py="b", new_txt="n"))
    assert (changed.added, changed.changed, changed.removed) == (["new.txt"], ["calc.py"], [])
    assert "changed calc.py" in changed.said()


def test_a_permit_explains_only_the_paths_it_named_until_its_call_ends() -> None:
    watch = ChangeWatch()
    watch.look(files(calc_py="a", notes_txt="x"))
    watch.permit("c1", {"calc.py"})
    assert not watch.look(files(calc_py="b", notes_txt="x"))
    assert watch.look(files(calc_py="b", notes_txt="y")).changed == ["notes.txt"]
    watch.ended("c1")
    assert not watch.look(files(calc_py="c", notes_txt="y"))  # its last look
    assert watch.look(files(calc_py="d", notes_txt="y")).changed == ["calc.py"]


def test_a_permit_for_a_command_explains_everything_only_while_its_turn_lasts() -> None:
    watch = ChangeWatch()
    watch.look(files(a="1"))
    watch.permit("c1", None)
    assert not watch.look(files(a="2", b="1"))
    watch.turn_ended()
    assert not watch.look(files(a="3", b="1"))
    assert watch.look(files(a="4", b="1")).changed == ["a"]


def test_what_an_agent_renews_per_call_is_left_out_and_its_input_kept() -> None:
    codex = {
        "command": ["cat", "calc.py"],
        "call_id": f"call_{uuid.uuid4().hex[:24]}",
        "process_id": "48213",
        "turn_id": str(uuid.uuid4()),
        "started_at_ms": int(time.time() * 1000),
    }
    assert steady(codex) == {"command": ["cat", "calc.py"]}
    kept = {"issue_id": 2, "file_id": "notes", "start_time": "10:00", "limit": 5}
    assert steady(kept) == kept
    assert steady({"path": "a", "nonce_field": "x"}, frozenset({"nonce_field"})) == {"path": "a"}


def test_a_call_without_input_is_shown_by_its_locations_and_diffs(tmp_path: Path) -> None:
    def edit(new: str) -> Any:
        diff = SimpleNamespace(type="diff", path=str(tmp_path / "calc.py"), old_text="a - b",
                               new_text=new)  # fmt: skip
        where = SimpleNamespace(path=str(tmp_path / "calc.py"))
        return SimpleNamespace(locations=[where], content=[diff])

    first, second = shown_input(edit("a + b"), tmp_path), shown_input(edit("b + a"), tmp_path)
    assert first["locations"] == ["calc.py"] and first != second
    assert first["diffs"][0]["new_text"] == "a + b"
    assert shown_input(SimpleNamespace(locations=[], content=[]), tmp_path) == {}
    assert "nothing to judge" in NOTHING_TO_JUDGE


class EditsEverything:
    """An operator who approves every write with their own arguments."""

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        edited = {**request.args, "text": "the operator's words"}
        return ApprovalDecision(call_id=request.call_id, approved=True, args=edited, by="ann")


async def test_an_edit_a_call_cannot_carry_out_is_recorded_as_a_rejection_telling_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(kinds.KINDS, "toy", "toy_kind.kind")
    monkeypatch.setenv("TOY_NOT_EDITABLE", "the toy agent writes its own words")
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    toy = Path(__file__).parent / "envs" / "toy"
    prepared = prepare_run(RunOptions(env=str(toy)), approver=EditsEverything(), bus=bus)
    try:
        outcome = await prepared.runtime.run()
    finally:
        prepared.cleanup()
    decided = [e for e in recorder.events if isinstance(e, ApprovalDecided)]
    assert decided and not any(e.approved for e in decided)
    assert decided[0].args is None and decided[0].by == "ann"
    assert decided[0].reason.startswith('Run it with this input instead: {"name"')
    assert "the operator's words" in decided[0].reason
    assert not (prepared.workdir / "first.txt").exists()
    assert outcome.stop_reason.value == "stalled"
