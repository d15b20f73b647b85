"""One seam for kinds of run: a kind is its package and one line in `operator/kinds.py`; its
loop reaches the run only through `RunHost`; the approval loop is written once, in the core.
Shown with a kind written here (`tests/toy_kind`), registered by one line, run end to end."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from conftest import Recorder

from loopdeck.core.approvals import AutoApprover, DenyApprover
from loopdeck.core.events import ApprovalDecided, ApprovalRequested, EventBus
from loopdeck.core.scenario import ScenarioError
from loopdeck.core.states import StopReason
from loopdeck.operator import kinds
from loopdeck.operator.launch import RunOptions, prepare_run

TOY = Path(__file__).parent / "envs" / "toy"
SRC = Path(__file__).resolve().parent.parent / "src" / "loopdeck"
KIND_PACKAGES = tuple(name.split(".")[1] for name in kinds.KINDS.values())


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one line a new kind adds to the registry."""
    monkeypatch.setitem(kinds.KINDS, "toy", "toy_kind.kind")


async def run_toy(approver: Any) -> tuple[Any, Recorder]:
    bus, recorder = EventBus(), Recorder()
    bus.subscribe(recorder)
    prepared = prepare_run(RunOptions(env=str(TOY)), approver=approver, bus=bus)
    try:
        return await prepared.runtime.run(), recorder
    finally:
        prepared.cleanup()


@pytest.mark.usefixtures("toy_registered")
async def test_a_kind_added_by_its_package_and_one_registry_line_runs_end_to_end() -> None:
    outcome, recorder = await run_toy(AutoApprover())
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert outcome.model == "toy agent"
    asked = [e.call_id for e in recorder.events if isinstance(e, ApprovalRequested)]
    decided = [e.call_id for e in recorder.events if isinstance(e, ApprovalDecided)]
    assert asked == decided == ["c1", "c2"]  # every write asked through the one loop


@pytest.mark.usefixtures("toy_registered")
async def test_a_kinds_writes_are_decided_by_the_runs_approver() -> None:
    outcome, _ = await run_toy(DenyApprover())
    assert outcome.stop_reason is StopReason.STALLED  # nothing written: nothing changed
    assert [c.status.value for c in outcome.calls] == ["rejected"]


def test_a_table_no_kind_claims_is_named() -> None:
    with pytest.raises(ScenarioError, match=r"unknown table \[toy\].*\[mcp\], \[agent\]"):
        prepare_run(RunOptions(env=str(TOY)))


def _imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return found


def _package_of(path: Path) -> str:
    return path.relative_to(SRC).parts[0]


def test_nothing_outside_a_kind_imports_it() -> None:
    """The registry names kinds by module path; no other module imports a kind's package, so
    nothing else can branch on kinds."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        home = _package_of(path)
        for imported in _imports(path):
            parts = imported.split(".")
            kind = parts[1] if len(parts) > 1 and parts[0] == "loopdeck" else ""
            if kind in KIND_PACKAGES and kind != home:
                bad.append(f"{path.relative_to(SRC)} imports {imported}")
    assert bad == []


def test_the_approval_loop_is_written_once() -> None:
    """Only `core/write_approvals.py` asks for a write (`ask_once`) and counts the asks."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).as_posix() == "core/write_approvals.py":
            continue
        text = path.read_text(encoding="utf-8")
        for word in ("ask_once(", "MAX_APPROVAL_ASKS"):
            said_only = path.name == "decision_commands.py" and word == "MAX_APPROVAL_ASKS"
            if word in text and not said_only:  # (`approve`'s refusal says the number)
                bad.append(f"{path.relative_to(SRC)}: {word}")
    assert bad == []
