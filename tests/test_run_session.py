"""One session records every run of this process (`operator/session.py`), and one function
chooses who decides its writes (`operator/approving.py`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES

from loopdeck.cli.runs import run_recorded_headless
from loopdeck.core.approvals import AutoApprover, DenyApprover
from loopdeck.core.scenario import ScenarioError
from loopdeck.operator import approving
from loopdeck.operator.approval_queue import ApprovalQueue, StoreBackedQueue
from loopdeck.operator.approving import WAIT_IN_CONSOLE, deciders
from loopdeck.operator.launch import RunOptions
from loopdeck.operator.session import RunSession
from loopdeck.store.approver import StoreAnswerer, StoreApprover

ENV = str(SAMPLES / "order_support")


def _rows(db: Path) -> dict[str, Any]:
    """What a run left in its store, without what differs between two runs of one script
    (ids, times, the runner's process)."""
    with sqlite3.connect(db) as conn:
        runs = conn.execute(
            "SELECT env, script, model, state, stop_reason, approve_mode FROM runs"
        ).fetchall()
        kinds = [k for (k,) in conn.execute("SELECT kind FROM events ORDER BY seq")]
        approvals = conn.execute(
            "SELECT call_id, tool, state, decided_by, reason FROM approvals ORDER BY call_id"
        ).fetchall()
    return {"runs": runs, "kinds": kinds, "approvals": approvals}


async def test_the_headless_run_and_the_consoles_run_are_recorded_by_one_session(
    tmp_path, monkeypatch
) -> None:
    recorded: list[bool] = []
    record = RunSession.record

    async def spy(self: RunSession) -> Any:
        recorded.append(self.console)
        return await record(self)

    monkeypatch.setattr(RunSession, "record", spy)
    options = RunOptions(env=ENV, script="solve", approve="auto")
    headless = await run_recorded_headless(options, tmp_path / "headless.db")
    session = RunSession(tmp_path / "console.db", console=True)
    session.prepare(options)
    try:
        console = await session.link().drive()
    finally:
        session.cleanup()
    assert recorded == [False, True]
    assert console is not None
    assert headless.stop_reason == console.stop_reason
    alone, in_console = _rows(tmp_path / "headless.db"), _rows(tmp_path / "console.db")
    # The one difference: who was to decide (the console, though `--approve auto` did).
    assert [r[-1] for r in alone["runs"]] == ["auto"]
    assert [r[-1] for r in in_console["runs"]] == ["console"]
    assert [r[:-1] for r in alone["runs"]] == [r[:-1] for r in in_console["runs"]]
    assert alone["kinds"] == in_console["kinds"] and "approval_decided" in alone["kinds"]
    assert alone["approvals"] == in_console["approvals"]
    assert [a[2:4] for a in alone["approvals"]] == [("approved", "auto")]


def test_approve_wait_in_the_console_is_refused_with_its_message(cli) -> None:
    code, _, err = cli("run", ENV, "--script", "solve", "--approve", "wait")
    assert code == 2
    assert err == f"loopdeck: {WAIT_IN_CONSOLE}\n"
    assert WAIT_IN_CONSOLE == "--approve wait is for --headless runs; the console decides itself"
    with pytest.raises(ScenarioError, match="the console decides itself"):
        deciders("wait", model="scripted", console=True, recording=None)


def test_a_run_id_the_store_holds_is_refused_before_anything_says_started(tmp_path, cli) -> None:
    db = str(tmp_path / "s.db")
    run = ("run", ENV, "--script", "solve", "--headless", "--approve", "auto", "--db", db)
    code, _, err = cli(*run, "--run-id", "r1")
    assert code == 0, err
    code, _, err = cli(*run, "--run-id", "r1")
    assert code == 2
    assert err == f"loopdeck: --run-id r1: {db} already holds a run with this id; choose another\n"


class _Recording:
    """A store and writer that are never reached: the choice alone is tested."""

    store: Any = None
    writer: Any = None


@pytest.mark.parametrize(
    ("approve", "console", "recorded", "approver", "answerer", "queue"),
    [
        (None, False, True, AutoApprover, type(None), type(None)),  # scripted: auto
        ("auto", False, True, AutoApprover, type(None), type(None)),
        ("deny", False, False, DenyApprover, type(None), type(None)),
        ("wait", False, True, StoreApprover, StoreAnswerer, type(None)),
        (None, True, True, StoreBackedQueue, StoreBackedQueue, StoreBackedQueue),
        (None, True, False, ApprovalQueue, ApprovalQueue, ApprovalQueue),
        ("auto", True, True, AutoApprover, StoreBackedQueue, StoreBackedQueue),
        ("deny", True, True, DenyApprover, StoreBackedQueue, StoreBackedQueue),
    ],
)
def test_one_function_chooses_who_decides(
    approve, console, recorded, approver, answerer, queue
) -> None:
    recording = _Recording() if recorded else None
    chosen = deciders(approve, model="scripted", console=console, recording=recording)
    assert type(chosen.approver) is approver
    assert type(chosen.answerer) is answerer and type(chosen.queue) is queue
    if isinstance(chosen.queue, StoreBackedQueue):
        assert chosen.queue.recording is recording  # complete from its constructor
    if console and approve is None:
        assert chosen.approver is chosen.queue is chosen.answerer


def test_headless_wait_needs_the_store_and_a_real_model_needs_approve() -> None:
    with pytest.raises(ScenarioError, match="needs the event store"):
        deciders("wait", model="scripted", console=False, recording=None)
    with pytest.raises(ScenarioError, match="--approve is required with a real model"):
        deciders(None, model="openai/gpt-4o", console=False, recording=None)
    assert approving.refusal("wait", console=False) is None
