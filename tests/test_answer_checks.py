"""An answer is checked before it is recorded with the check its run applies
(`core/budget_answer.read_answer`, one function): a budget's `raise N` the run would refuse
(not a finite number, not above what the cap has used, a fraction of a count) and an empty
answer are refused by `loopdeck answer` with exit 2 and the run's words, nothing recorded;
the run itself takes no such number as a cap (`raise inf` crashed it), it asks again."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_answers import _run_with_pause
from test_decision_refusals import Cli, Recorded, record, recorded, rows

from loopdeck.caps import Cap
from loopdeck.core.budget_answer import BudgetAnswer, read_answer
from loopdeck.core.decision_events import QuestionAsked
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator.inbox import Inbox, PendingQuestion, read_entries
from loopdeck.store.opening import open_store

BUDGET = ["continue", "raise", "stop"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("raise inf", "`raise N` needs a finite number, not 'inf'"),
        ("raise 1e309", "`raise N` needs a finite number, not '1e309'"),
        ("raise nan", "`raise N` needs a finite number, not 'nan'"),
        ("raise -inf", "`raise N` needs a finite number, not '-inf'"),
        ("raise 1", "the cap must be above 2, not 1"),
        ("raise -5", "the cap must be above 2, not -5"),
        ("raise 2", "the cap must be above 2, not 2"),
        ("raise 2.5", "the turns cap is a whole number, not 2.5"),
        ("raise lots", "`raise N` needs a number, not 'lots'"),
        ("raise", "`raise` needs its N: answer `raise N` (one argument)"),
        ("", "it takes `continue`, `raise N` or `stop`; an empty answer is none of them"),
        ("  ", "it takes `continue`, `raise N` or `stop`; an empty answer is none of them"),
        ("maybe", "it takes `continue`, `raise N` or `stop`; 'maybe' is none of them"),
    ],
)
def test_a_cap_the_run_cannot_take_is_said_why(text: str, problem: str) -> None:
    assert read_answer(text, Cap.TURNS, 2.0) == problem


def test_the_answers_the_run_carries_out() -> None:
    assert read_answer("raise 1,000", Cap.TURNS, 2.0) == BudgetAnswer("raise", 1000.0)
    assert read_answer("r 3", Cap.TURNS, 2.0) == BudgetAnswer("raise", 3.0)
    assert read_answer("raise 0.75", Cap.COST, 0.5) == BudgetAnswer("raise", 0.75)
    assert read_answer("raise 0.5") == BudgetAnswer("raise", 0.5)  # used unknown: above 0
    assert read_answer("raise 0") == "the cap must be above 0, not 0"
    assert read_answer("Continue", Cap.TURNS, 2.0) == BudgetAnswer("continue")
    assert read_answer("stop", Cap.TURNS, 2.0) == BudgetAnswer("stop")


async def test_a_non_finite_or_too_low_cap_is_asked_again_and_never_crashes_the_run() -> None:
    outcome, recorder, asked = await _run_with_pause(
        ["raise inf", "raise 1e309", "raise 20"], max_turns=6
    )
    assert outcome.stop_reason is StopReason.GOAL_MET, outcome.detail
    assert asked[1].startswith("Not understood: 'raise inf': `raise N` needs a finite number")
    assert asked[2].startswith("Not understood: 'raise 1e309'")
    assert recorder.kinds("budget_updated")[-1].usage["turns"][1] == 20
    first = recorder.kinds("question_asked")[0]
    assert (first.cap, first.used) == (Cap.TURNS, 3.0)  # what every front end checks against


def _budget_run(run_id: str) -> Recorded:
    run = Recorded(run_id).started(RunState.AWAITING_ANSWER)
    return run.add(
        QuestionAsked, question_id="q1", question="Raise?", topic="budget", choices=BUDGET,
        cap=Cap.TURNS, used=2.0,
    )  # fmt: skip


def test_loopdeck_answer_refuses_a_cap_its_run_would_refuse(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "s.db"
    recorded(db, _budget_run("r1"))
    for text, problem in (
        ("raise inf", "`raise N` needs a finite number, not 'inf'"),
        ("raise 1e309", "`raise N` needs a finite number, not '1e309'"),
        ("raise nan", "`raise N` needs a finite number, not 'nan'"),
        ("raise 1", "the cap must be above 2, not 1"),
        ("raise -5", "the cap must be above 2, not -5"),
        ("raise 2.5", "the turns cap is a whole number, not 2.5"),
    ):
        code, said, err = cli("answer", "r1", text, "--json", "--db", str(db))
        assert code == 2, (text, err)
        assert f"run r1's question q1: {problem}; nothing was answered" in err
        assert said is None  # nothing said answered
    assert rows(db) == {"r1/q1": ("pending", None, None)}
    code, said, err = cli("answer", "r1", "raise 3", "--json", "--db", str(db))
    assert code == 0, err
    assert rows(db)["r1/q1"][:2] == ("answered", "raise 3")


def test_loopdeck_answer_refuses_an_empty_answer(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "s.db"
    free = Recorded("r1").started(RunState.AWAITING_ANSWER).question("q1", [], topic="ask_user")
    recorded(db, free, _budget_run("r2"))
    for text in ("", "   \n"):
        code, _, err = cli("answer", "r1", text, "--db", str(db))
        assert code == 2 and "run r1's question q1: the answer is empty" in err
        code, _, err = cli("answer", "r2", text, "--db", str(db))
        assert code == 2 and "an empty answer is none of them" in err
    assert {state for state, _, _ in rows(db).values()} == {"pending"}
    assert cli("answer", "r1", "ORD-1042", "--db", str(db))[0] == 0


async def test_the_inbox_reads_a_budget_question_with_what_it_had_used(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "s.db")
    try:
        await record(store, _budget_run("r1"))
        [question] = await read_entries(store)
        assert isinstance(question, PendingQuestion)
        assert (question.cap, question.used) == (Cap.TURNS, 2.0)
        inbox = Inbox(store=store)
        with pytest.raises(ValueError, match="q1: the cap must be above 2, not 1"):
            await inbox.answer(question, "raise 1")
        assert await inbox.answer(question, "raise 4")
    finally:
        await store.close()
