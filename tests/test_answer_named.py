"""An answer names its question: `loopdeck answer RUN TEXT --question QID` answers that one or,
if it is no longer open, nothing (exit 1, said by name, with what the run asks now), never a
question asked since (a budget's pause the operator never saw); without `--question` it says
which question it answered. A push's command names its question; `pending --json` lists the
questions after the writes, each with `"kind": "question"`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from test_decision_refusals import Cli, Recorded, recorded, rows

from loopdeck.caps import Cap
from loopdeck.core.decision_events import QuestionAsked
from loopdeck.core.states import RunState
from loopdeck.operator.push_words import Asked, RunAbout, command

BUDGET = ["continue", "raise", "stop"]


def _two_questions(run_id: str = "r1") -> Recorded:
    """The agent's question q1, then a budget's pause q2, both waiting."""
    run = Recorded(run_id).started(RunState.AWAITING_ANSWER)
    run.question("q1", [], topic="ask_user")
    return run.add(
        QuestionAsked, question_id="q2", question="Budget: 80% of turns used.\nGo on?",
        topic="budget", choices=BUDGET, cap=Cap.TURNS, used=8.0,
    )  # fmt: skip


def test_an_answer_to_a_question_no_longer_open_answers_no_other(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "s.db"
    recorded(db, _two_questions())
    code, said, err = cli("answer", "r1", "ORD-1042", "--question", "q1", "--json", "--db", str(db))
    assert code == 0, err
    assert said == {"run_id": "r1", "answered": True, "question_id": "q1"}
    # The same answer again (a pushed link took it first, say): q2 waits, and is not answered.
    code, said, err = cli("answer", "r1", "continue", "--question", "q1", "--db", str(db))
    assert code == 1
    assert "run r1's question q1 is no longer open (already answered by cli:" in err
    assert "nothing was answered" in err
    assert "it now asks q2 (Budget: 80% of turns used. Go on?)" in err
    assert "`loopdeck answer r1 continue|'raise N'|stop --question q2`" in err
    assert rows(db)["r1/q2"][0] == "pending"
    code, _, err = cli("answer", "r1", "continue", "--question", "q9", "--db", str(db))
    assert code == 1 and "run r1's question q9 was never asked: nothing was answered" in err
    assert rows(db)["r1/q2"][0] == "pending"


def test_an_answer_without_a_question_says_which_it_answered(
    tmp_path: Path, cli: Cli, capsys
) -> None:
    db = tmp_path / "s.db"
    recorded(db, _two_questions())
    from loopdeck.cli import main

    assert main(["answer", "r1", "ORD-1042", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == "r1: answered q1 (What now?)"
    assert main(["answer", "r1", "continue", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == "r1: answered q2 (Budget: 80% of turns used. Go on?)"
    assert (rows(db)["r1/q1"][:2], rows(db)["r1/q2"][:2]) == (
        ("answered", "ORD-1042"), ("answered", "continue")
    )  # fmt: skip


def test_a_named_question_is_checked_for_the_answers_it_takes(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "s.db"
    recorded(db, _two_questions())
    code, _, err = cli("answer", "r1", "raise 3", "--question", "q2", "--db", str(db))
    assert code == 2 and "run r1's question q2: the cap must be above 8, not 3" in err
    code, said, err = cli("answer", "r1", "raise 20", "--question", "q2", "--json", "--db", str(db))
    assert code == 0 and said is not None and said["question_id"] == "q2", err
    assert rows(db)["r1/q1"][0] == "pending"  # the older one, left as it was


def test_pending_json_lists_the_questions_after_the_writes(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "s.db"
    writes = Recorded("r2").started(RunState.AWAITING_APPROVAL).write("c1")
    recorded(db, _two_questions(), writes)
    code, listed, err = cli("pending", "--json", "--db", str(db))
    assert code == 0 and isinstance(listed, list), err
    assert [(item.get("kind"), item["run_id"], item["call_id"]) for item in listed] == [
        ("write", "r2", "c1"), ("question", "r1", "q1"), ("question", "r1", "q2"),
    ]  # fmt: skip
    budget = listed[2]
    assert budget["question"] == "Budget: 80% of turns used.\nGo on?"
    assert budget["choices"] == BUDGET
    assert budget["command"] == "loopdeck answer r1 continue|'raise N'|stop --question q2"
    assert listed[0]["tool"] == "write_file"  # a write as it was, its kind said
    assert "r1 asks (q2): " in err and "--question q2" in err  # the table's form: on stderr


def test_a_pushs_command_names_its_question() -> None:
    run = RunAbout("r1", "env/solve", "/tmp/runs.db")
    until = datetime.now(UTC) + timedelta(minutes=5)
    asked = Asked("q2", "question", "answer the budget's pause", until, answers=("continue",))
    said = command(run, asked)
    assert said == "loopdeck answer r1 continue --question q2 --db /tmp/runs.db"


def test_a_pushed_questions_command_says_the_words_its_choices_take() -> None:
    """As `pending` says them: a guard's `nudge TEXT`, a budget's `raise N` (the push said
    `stop|allow|nudge`, and `nudge` alone is refused)."""
    from loopdeck.operator.push_words import Asked, RunAbout, command

    guard = Asked("q1", "question", "the loop repeats", None, answers=("stop", "allow", "nudge"))
    said = command(RunAbout("r1", "env"), guard)
    assert said == "loopdeck answer r1 'stop|allow|nudge TEXT' --question q1"
