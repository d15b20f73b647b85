"""`loopdeck answer` and the questions `pending` lists: a question is named by its id (`q2`,
as `pending`, a push and the console show it), so an answer meant for one question never
lands on another asked since (`--question`); an answer without it says which it answered."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from loopdeck.core.text import capped, visible
from loopdeck.operator import records
from loopdeck.operator.records import PendingQuestion, Store, Tell

WORDS_SHOWN = 80  # characters of a question's words said beside its id


def words_of(question: PendingQuestion) -> str:
    """The question's words on one line, cut short, nothing in them obeyed by a terminal."""
    return visible(capped(" ".join(question.question.split()), WORDS_SHOWN))


def answer_command(question: PendingQuestion) -> str:
    """The command that answers exactly this question (its choices, else TEXT)."""
    forms = [shlex.quote(form) for form in records.answer_forms(question.choices)]
    run_id = shlex.quote(question.run_id)
    said = "|".join(forms) or "TEXT"
    return f"loopdeck answer {run_id} {said} --question {shlex.quote(question.call_id)}"


def print_questions(questions: list[PendingQuestion]) -> None:
    """`pending`'s questions, each with the command that answers it (on stderr: stdout keeps
    its one table or JSON value)."""
    for question in questions:
        run_id = visible(question.run_id)
        print(
            f"{run_id} asks ({visible(question.call_id)}): {visible(question.question)}"
            f"  → {visible(answer_command(question))}",
            file=sys.stderr,
        )


def question_json(question: PendingQuestion) -> dict[str, object]:
    """A question as `pending --json` lists it, after the writes: `kind` tells it from them
    (a write's is `write`, an unknown outcome's `outcome`); `call_id` is its id, as `answer
    --question` takes it."""
    return {
        "kind": "question",
        "run_id": question.run_id,
        "call_id": question.call_id,
        "question": question.question,
        "choices": list(question.choices),
        "answers": records.answer_forms(question.choices),
        "env": question.env,
        "command": answer_command(question),
    }


async def answer(store: Store, args: argparse.Namespace, by: str, tell: Tell) -> int:
    """Exit 1 if nothing was answered (no question waits, the one `--question` names is no
    longer open, the run ended); `NotOffered` (exit 2) if the question does not take it."""
    result: dict[str, object] = {"run_id": args.run_id, "answered": False}
    try:
        answered = await records.answer(
            store, args.run_id, args.text, by=by, tell=tell, question_id=args.question
        )
    except records.RunEnded as exc:
        answered, said = None, str(exc)
    else:
        said = "" if answered is not None else await _not_answered(store, args)
    if answered is None:
        print(f"loopdeck: {visible(said)}", file=sys.stderr)
        if args.json:
            print(json.dumps({**result, "message": said}))
        return 1
    if args.json:
        print(json.dumps({**result, "answered": True, "question_id": answered.call_id}))
    else:
        print(
            f"{visible(args.run_id)}: answered {visible(answered.call_id)} ({words_of(answered)})"
        )
    return 0


async def _not_answered(store: Store, args: argparse.Namespace) -> str:
    """Why nothing was answered, and what waits instead."""
    run_id, named = args.run_id, args.question
    questions = [q for q in (await records.pending(store))[1] if q.run_id == run_id]
    if named is None:
        said = f"run {run_id} has no question waiting"
    else:
        said = f"run {run_id}'s question {named} {await _standing(store, run_id, named)}"
        said += ": nothing was answered"
    if questions:
        now = questions[0]
        return f"{said}; it now asks {now.call_id} ({words_of(now)}): `{answer_command(now)}`"
    if writes := await records.waiting_writes(store, run_id):
        some = f"writes {', '.join(writes)} wait" if len(writes) > 1 else f"write {writes[0]} waits"
        said += (
            f"; its {some} for approval, not an answer: "
            f"`loopdeck approve {run_id} {writes[0]}` or "
            f"`loopdeck reject {run_id} {writes[0]} --reason TEXT`"
        )
    return said


async def _standing(store: Store, run_id: str, question_id: str) -> str:
    asked = await records.asked(store, run_id, question_id)
    if asked is None:
        return "was never asked"
    if asked.tool:  # a request event of a tool's call: a write, not a question
        return f"is a write ({asked.tool}), not a question: approve or reject it"
    if asked.state == "pending":
        return "is still open"  # it came between the answer and this read
    by = f" by {asked.by}" if asked.by else ""
    return f"is no longer open (already {asked.state}{by})"
