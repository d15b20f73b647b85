"""A decision is carried out as the store records it, or refused by name (issue 36): from the
command line, an edit of a call that cannot run one (`not_editable`), an approval of an expired
request, a decision or an answer for a run that ended, and an answer a question does not offer
are refused with what to do instead, and nothing is recorded. The runs are written as their
runner writes them (`EventWriter`, this process the runner: alive), with no runtime."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopdeck.core.approvals import request_for
from loopdeck.core.decision_events import ApprovalRequested, ApprovalWithdrawn, QuestionAsked
from loopdeck.core.events import Event, RunStarted, RunStopped, StateChanged
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator.inbox import Inbox, PendingQuestion, read_entries
from loopdeck.store import deciding
from loopdeck.store.base import Store, StoreError
from loopdeck.store.opening import open_store
from loopdeck.store.writer import EventWriter

Cli = Callable[..., tuple[int, Any, str]]
WHY = "the agent runs its own input: an edit of its call cannot be applied"
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


class Recorded:
    """A run's events, numbered as its runner numbers them."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.events: list[Event] = []

    def add(self, cls: type[Any], **fields: Any) -> Recorded:
        self.events.append(cls(run_id=self.run_id, seq=len(self.events) + 1, **fields))
        return self

    def started(self, state: RunState) -> Recorded:
        self.add(
            RunStarted, env="decisions", script="files", model="scripted", mode="react",
            goal="g", budget={},
        )  # fmt: skip
        return self.add(StateChanged, source=RunState.READY, target=state)

    def write(self, call_id: str, *, ttl_s: float = 300, not_editable: str = "") -> Recorded:
        request = request_for(
            run_id=self.run_id, call_id=call_id, tool="write_file", args={"path": "a.txt"},
            state_hash="s1", fingerprint="f1", plan_step="1. write it", ttl_s=ttl_s,
            args_schema=SCHEMA, not_editable=not_editable,
        )  # fmt: skip
        fields = request.model_dump(exclude={"run_id"})
        return self.add(ApprovalRequested, grant_id=None, **fields)

    def question(self, question_id: str, choices: list[str], topic: str = "loop") -> Recorded:
        return self.add(
            QuestionAsked, question_id=question_id, question="What now?", topic=topic,
            choices=choices,
        )  # fmt: skip

    def stopped(self, *, withdrawn: list[str]) -> Recorded:
        for call_id in withdrawn:
            self.add(ApprovalWithdrawn, call_id=call_id)
        return self.add(
            RunStopped, state=RunState.STOPPED, stop_reason=StopReason.KILLED,
            detail="killed by cli:someone",
        )  # fmt: skip


async def record(store: Store, *runs: Recorded) -> None:
    """The runs' events and rows, as their runner (this process) commits them."""
    for run in runs:
        writer = EventWriter(store, approve_mode="wait")
        for event in run.events:
            writer(event)
        await writer.flush()


def recorded(db: Path, *runs: Recorded) -> None:
    async def write() -> None:
        store = await open_store(db)
        try:
            await record(store, *runs)
        finally:
            await store.close()

    asyncio.run(write())


def rows(db: Path) -> dict[str, tuple[Any, ...]]:
    """Each request's row: (state, reason, edited_args), by "run/call"."""

    async def read() -> dict[str, tuple[Any, ...]]:
        store = await open_store(db)
        try:
            found = await store.fetchall(
                "SELECT run_id, call_id, state, reason, edited_args FROM approvals"
            )
        finally:
            await store.close()
        return {
            f"{row['run_id']}/{row['call_id']}": (row["state"], row["reason"], row["edited_args"])
            for row in found
        }

    return asyncio.run(read())


def test_an_edit_of_a_call_that_cannot_run_one_is_refused_with_what_to_do(
    tmp_path: Path, cli: Cli
) -> None:
    db = tmp_path / "s.db"
    recorded(db, Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1", not_editable=WHY))
    code, _, err = cli("approve", "r1", "c1", "--args", '{"path": "b.txt"}', "--db", str(db))
    assert code == 2
    assert f"c1 cannot be approved with other input: {WHY}; nothing was decided" in err
    assert "Reject it and tell the agent what to do instead: loopdeck reject r1 c1 --reason" in err
    assert 'Run it with this input instead: {"path": "b.txt"}' in err
    assert rows(db) == {"r1/c1": ("pending", None, None)}
    code, said, err = cli("approve", "r1", "c1", "--grant", "exact", "--json", "--db", str(db))
    assert code == 0, err  # as proposed, with a grant: what the call can carry out
    assert said is not None and (said["decided"], said["state"]) == (True, "approved")


def test_a_grant_naming_a_field_the_tool_does_not_take_decides_nothing(
    tmp_path: Path, cli: Cli
) -> None:
    db = tmp_path / "s.db"
    recorded(db, Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1"))
    code, _, err = cli(
        "approve", "r1", "c1", "--grant", "path=src/*,nosuchfield=*", "--db", str(db)
    )
    assert code == 2
    assert "approve c1 --grant: grant 'path=src/*,nosuchfield=*': nosuchfield is not an" in err
    assert "argument of write_file (it takes path); nothing was decided" in err
    assert rows(db) == {"r1/c1": ("pending", None, None)}
    assert cli("grants", "--json", "--db", str(db))[1] == []
    code, said, err = cli("approve", "r1", "c1", "--grant", "path=*.txt", "--json", "--db", str(db))
    assert code == 0, err
    assert said is not None and (said["decided"], said["state"]) == (True, "approved")


def test_an_expired_request_is_marked_by_pending_and_its_approval_refused(
    tmp_path: Path, cli: Cli
) -> None:
    db = tmp_path / "s.db"
    recorded(db, Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1", ttl_s=0.001))
    code, listed, _ = cli("pending", "--json", "--db", str(db))
    assert code == 0 and listed is not None
    assert [(item["call_id"], item["expired"]) for item in listed] == [("c1", True)]
    for command in ("approve", "reject"):  # the run takes neither: it asks again
        code, said, err = cli(command, "r1", "c1", "--json", "--db", str(db))
        assert code == 1
        assert "c1's approval request expired unanswered at " in err
        assert "nothing was decided; the run will ask again (it stops after 3" in err
        assert (
            f"decide the new request (`loopdeck pending`, then `loopdeck {command} r1 c1`)" in err
        )
        assert said is not None and (said["decided"], said["state"]) == (False, "expired")
        assert rows(db) == {"r1/c1": ("pending", None, None)}


def test_pending_says_expired_in_its_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopdeck.cli import main

    monkeypatch.setenv("COLUMNS", "300")  # one row a line
    db = tmp_path / "s.db"
    run = Recorded("r1").started(RunState.AWAITING_APPROVAL)
    recorded(db, run.write("c1", ttl_s=0.001).write("c2", ttl_s=600))
    assert main(["pending", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    [old] = [line for line in lines if " c1 " in line]
    [live] = [line for line in lines if " c2 " in line]
    assert "expired at" in old and "expired" not in live


def test_a_decision_for_a_run_that_ended_is_refused_by_name(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "s.db"
    withdrawn = Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1")
    withdrawn.stopped(withdrawn=["c1"])
    # A kind of run that stopped without withdrawing its request: its stop withdraws it.
    left = Recorded("r2").started(RunState.AWAITING_APPROVAL).write("c1").stopped(withdrawn=[])
    recorded(db, withdrawn, left)
    for command in ("approve", "reject"):
        code, said, err = cli(command, "r1", "c1", "--json", "--db", str(db))
        assert code == 1
        assert "run r1 already ended (killed): nothing will act on your" in err
        assert "its request was withdrawn when the run stopped" in err
        assert "already decided" not in err and "None" not in err
        assert said is not None and (said["decided"], said["state"]) == (False, "withdrawn")
    code, said, err = cli("approve", "r2", "c1", "--json", "--db", str(db))
    assert code == 1 and "run r2 already ended (killed)" in err
    assert said is not None and said["decided"] is False
    assert rows(db) == {"r1/c1": ("withdrawn", None, None), "r2/c1": ("withdrawn", None, None)}
    code, said, err = cli("answer", "r1", "stop", "--json", "--db", str(db))
    assert code == 1 and "run r1 already ended (killed): nothing will act on your answer" in err
    assert said is not None and said["answered"] is False and "already ended" in said["message"]


async def test_the_store_refuses_a_decision_for_an_ended_run_whatever_front_end(
    tmp_path: Path,
) -> None:
    from loopdeck.core.approvals import ApprovalDecision

    store = await open_store(tmp_path / "s.db")
    try:
        left = Recorded("r2").started(RunState.AWAITING_APPROVAL).write("c1")
        await record(store, left.question("q1", []).stopped(withdrawn=[]))
        yes = ApprovalDecision(call_id="c1", approved=True, by="console inbox")
        with pytest.raises(StoreError, match="run r2 already ended \\(killed\\)"):
            await deciding.decide(store, "r2", yes)
        with pytest.raises(StoreError, match="nothing will act on your answer"):
            await deciding.answer(store, "r2", "hello", "console")
        found = await store.fetchall("SELECT state FROM approvals WHERE call_id = 'c1'")
    finally:
        await store.close()
    assert [row["state"] for row in found] == ["withdrawn"]  # withdrawn by the run's stop


def test_an_answer_the_question_does_not_offer_is_refused_naming_its_choices(
    tmp_path: Path, cli: Cli
) -> None:
    db = tmp_path / "s.db"
    loop = Recorded("r1").started(RunState.AWAITING_ANSWER).question("q1", ["stop", "nudge"])
    budget = Recorded("r2").started(RunState.AWAITING_ANSWER)
    budget.question("q1", ["continue", "raise", "stop"], topic="budget")
    free = Recorded("r3").started(RunState.AWAITING_ANSWER).question("q1", [], topic="ask_user")
    recorded(db, loop, budget, free)
    code, _, err = cli("answer", "r1", "allow", "--db", str(db))
    assert code == 2
    assert "run r1's question q1: it offers only `stop`, `nudge TEXT`; 'allow' is not one" in err
    assert "nothing was answered" in err
    code, _, err = cli("answer", "r1", "nudge", "--db", str(db))
    assert code == 2 and "`nudge` needs its TEXT: answer `nudge TEXT` (one argument)" in err
    code, _, err = cli("answer", "r2", "raise lots", "--db", str(db))
    assert code == 2 and "`raise N` needs a number, not 'lots'" in err
    assert {state for state, _, _ in rows(db).values()} == {"pending"}
    for run_id, text in (("r1", "Nudge read the other file"), ("r2", "raise 5,000"), ("r3", "x")):
        code, said, err = cli("answer", run_id, text, "--json", "--db", str(db))
        assert code == 0, err
        assert said == {"run_id": run_id, "answered": True, "question_id": "q1"}
    assert rows(db)["r1/q1"] == ("answered", "Nudge read the other file", None)


def test_pending_names_the_answers_a_question_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopdeck.cli import main

    db = tmp_path / "s.db"
    loop = Recorded("r1").started(RunState.AWAITING_ANSWER).question("q1", ["stop", "nudge"])
    free = Recorded("r3").started(RunState.AWAITING_ANSWER).question("q1", [], topic="ask_user")
    recorded(db, loop, free)
    assert main(["pending", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert "r1 asks (q1): What now?  → loopdeck answer r1 stop|'nudge TEXT'" in err
    assert "r3 asks (q1): What now?  → loopdeck answer r3 TEXT" in err


async def test_the_inbox_reads_what_a_request_and_a_question_offer(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "s.db")
    try:
        writes = Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1", not_editable=WHY)
        asks = Recorded("r2").started(RunState.AWAITING_ANSWER).question("q1", ["stop", "nudge"])
        await record(store, writes, asks)
        write, question = await read_entries(store)
        assert getattr(write, "not_editable", None) == WHY
        assert isinstance(question, PendingQuestion) and question.choices == ("stop", "nudge")
        inbox = Inbox(store=store)
        with pytest.raises(ValueError, match="it offers only `stop`, `nudge TEXT`"):
            await inbox.answer(question, "allow")
        assert await inbox.answer(question, "stop")
        found = await store.fetchall("SELECT state, reason FROM approvals WHERE call_id = 'q1'")
    finally:
        await store.close()
    assert [tuple(row) for row in found] == [("answered", "stop")]
