"""The door from the command line (and a console's check before it opens) to the runs
recorded in a store: opening it, naming a run that is not there, the runs and what waits for
the operator, deciding and answering, commands to a live run, and a run's events.

Reading and deciding never create a store: a mistyped path is named, not made empty. A
decision goes through `store/deciding.py`, the one path that waits out a locked store and
refuses a dead runner's call or a run that ended. Runs whose runner is gone are marked crashed
here, in their own transactions, before a listing is read, so the list says so. An answer is
one its question takes (`not_offered`: never empty, one of its fixed choices, a budget's as its
run reads it), or it is refused before it is sent.
A run's log is exported with its hash chain and verified (`store/verification.py`,
`store/export_file.py`).
What it reads comes back as typed entries (`operator/entries.py`: `RunEntry`, `PendingWrite`,
`PendingQuestion`, `PendingOutcome`), the ones the console's inbox reads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from loopdeck.core.text import capped
from loopdeck.operator import entries
from loopdeck.operator.entries import (
    CHOICE_WORDS,
    NotOffered,
    PendingOutcome,
    PendingQuestion,
    PendingWrite,
    Placement,
    RunEntry,
    answer_forms,
    not_offered,
)
from loopdeck.store import asking_clock, deciding, outcome_queries, queries
from loopdeck.store.base import (
    INVALIDATED,
    RUN_ID_SHOWN,
    Location,
    Store,
    StoreError,
    shown_location,
)
from loopdeck.store.deciding import RunEnded
from loopdeck.store.export_file import exported_lines, verify_export
from loopdeck.store.opening import open_store
from loopdeck.store.verification import RunProof, verify_run, verify_store

if TYPE_CHECKING:  # the runtime's events and grants (pydantic): off `loopdeck runs`' imports
    from loopdeck.core.events import OutcomeResolved
    from loopdeck.core.grant_rules import GrantRule
    from loopdeck.operator.grant_book import GrantRow

__all__ = [
    "CHOICE_WORDS",
    "INVALIDATED",
    "LIVE_STATES",
    "AmbiguousRun",
    "Asked",
    "Decision",
    "Location",
    "NotOffered",
    "PendingOutcome",
    "PendingQuestion",
    "PendingWrite",
    "Placement",
    "RunEnded",
    "RunEntry",
    "RunProof",
    "Store",
    "StoreError",
    "Tell",
    "answer",
    "answer_forms",
    "asked",
    "check_run",
    "check_store",
    "decide",
    "event_bodies",
    "grants",
    "known_run",
    "local_time",
    "named_run",
    "not_offered",
    "opened",
    "pending",
    "resolve",
    "resolve_ended",
    "revoke",
    "runs",
    "send_command",
    "send_message",
    "shown_location",
    "unknown_outcomes",
    "verify_export",
    "verify_run",
    "verify_store",
    "waiting_writes",
]

Tell = Callable[[str], None]
LIVE_STATES = queries.LIVE_STATES
local_time = queries.local_time


@asynccontextmanager
async def opened(
    location: Location | None, *, create: bool = False, notes: Tell = deciding.untold
) -> AsyncIterator[Store]:
    """The store at `location` (the default one if None), its notes (spilled events brought
    back, or kept for later) told first, closed on the way out."""
    store = await open_store(location, create=create)
    try:
        for note in store.notes:
            notes(note)
        yield store
    finally:
        await store.close()


async def check_store(location: Location | None) -> None:
    """A store opens there (made if missing): raises `StoreError` naming why not."""
    store = await open_store(location)
    await store.close()


def _no_run(store: Store, run_id: str) -> StoreError:
    shown = capped(run_id, RUN_ID_SHOWN)  # a mistyped id may be a pasted page
    return StoreError(f"{store.path}: no run {shown!r} (see `loopdeck runs`)")


class AmbiguousRun(ValueError):
    """A run id's prefix that starts more than one run: the message lists them (exit 2)."""


CANDIDATES_SHOWN = 10


async def named_run(store: Store, run_id: str) -> RunEntry:
    """The run named by its id or by the one id that starts with `run_id`; `StoreError`
    naming the store if there is no such run, `AmbiguousRun` listing the runs if several ids
    start so."""
    entry = await entries.run_entry(store, run_id)
    if entry is None:
        entry = await entries.run_entry(store, await _run_id(store, run_id))
    if entry is None:  # gone between the two reads: not there
        raise _no_run(store, run_id)
    return entry


async def _run_id(store: Store, run_id: str) -> str:
    """The whole id of the run `run_id` names (itself, or the one id it starts)."""
    if await queries.run_row(store, run_id) is not None:
        return run_id
    ids = [str(r["run_id"]) for r in await queries.all_runs(store)] if run_id else []
    starting = sorted(i for i in ids if i.startswith(run_id))
    if len(starting) > 1:
        shown = ", ".join(starting[:CANDIDATES_SHOWN])
        more = (
            f" and {len(starting) - CANDIDATES_SHOWN} more"
            if len(starting) > CANDIDATES_SHOWN
            else ""
        )
        raise AmbiguousRun(
            f"{store.path}: run id {capped(run_id, RUN_ID_SHOWN)!r} is ambiguous: it starts"
            f" {len(starting)} runs: {shown}{more}; give more of it"
        )
    if not starting:
        raise _no_run(store, run_id)
    return starting[0]


async def known_run(store: Store, run_id: str) -> dict[str, Any]:
    """The run's whole row (every column), named as `named_run` names it. For `fork`'s and
    `explain`'s callers until they read `named_run`'s typed entry."""
    row = await queries.run_row(store, await _run_id(store, run_id))
    if row is None:
        raise _no_run(store, run_id)
    return row


async def check_run(location: Location | None, run_id: str) -> RunEntry:
    """The run, its runner's death first marked: what a console on it opens with."""
    async with opened(location) as store:
        await queries.mark_crashed_runners(store)
        return await named_run(store, run_id)


async def runs(store: Store) -> list[RunEntry]:
    """Every run, newest first (the runs queued for a worker first), with its unknown
    outcomes, whether it is paused and where a worker holds it."""
    await queries.mark_crashed_runners(store)
    return await entries.run_entries(store)


async def pending(store: Store) -> tuple[list[PendingWrite], list[PendingQuestion]]:
    """What waits for the operator in every live run: writes to approve (oldest asked
    first), questions to answer (with their choices)."""
    await queries.mark_crashed_runners(store)
    return await entries.pending_writes(store), await entries.pending_questions(store)


@dataclass(frozen=True)
class Asked:
    """A write's request as the store has it now: its row's state and expiry and, from its
    request event, the schema an edit is checked against, why an edit of it cannot be
    carried out (`not_editable`, "" when it can), its tool and the fields a grant can name
    (`arg_names`, None when the event is not there)."""

    state: str
    by: str | None
    expires_at: datetime
    args_schema: dict[str, Any]
    not_editable: str
    tool: str = ""
    arg_names: frozenset[str] | None = None
    requested_at: str | None = None  # which asking this is, as stored: a decision binds to it


# An asking's expiry judged on the store's clock, as a decision is (this host's may be minutes
# off the server's), and that clock's now: what has expired, said as a decision finds it.
expired_unanswered = asking_clock.expired_unanswered
store_now = asking_clock.store_now


async def asked(store: Store, run_id: str, call_id: str) -> Asked | None:
    """The run's request `call_id` as it stands (None: no such request)."""
    row = await queries.approval_state(store, run_id, call_id)
    if row is None:
        return None
    from loopdeck.core.grant_rules import argument_names

    found = await queries.approval_request(store, run_id, call_id)
    request = found or {}
    schema = dict(request.get("args_schema") or {})
    names = argument_names(schema, dict(request.get("args") or {}))
    return Asked(
        state=row["state"],
        by=row["decided_by"],
        expires_at=datetime.fromisoformat(row["expires_at"]),
        args_schema=schema,
        not_editable=str(request.get("not_editable") or ""),
        tool=str(request.get("tool") or ""),
        arg_names=None if found is None else frozenset(names),
        requested_at=row["requested_at"],
    )


@dataclass(frozen=True)
class Decision:
    """What became of an operator's decision: `won` if it was the one recorded; `state` and
    `by` as the store has the call now (None if there is no such call); `question` if the id
    is a question the run asked (answered, never approved)."""

    won: bool
    state: str | None
    by: str | None
    question: bool = False


async def decide(
    store: Store,
    run_id: str,
    call_id: str,
    *,
    approved: bool,
    by: str,
    reason: str,
    tell: Tell,
    args: dict[str, Any] | None = None,
    grant: GrantRule | None = None,
    asked_at: str | None = None,
) -> Decision:
    """Approve (with an edit of its arguments, with a grant) or reject a pending write (the
    asking `asked_at` names, as `asked` read it: never one the run asked after); a wait for
    a locked store is told (`tell`)."""
    from loopdeck.core.approvals import ApprovalDecision  # off `loopdeck runs`' imports

    decision = ApprovalDecision(
        call_id=call_id, approved=approved, by=by, reason=reason, args=args, grant=grant
    )
    won = await deciding.decide(store, run_id, decision, tell=tell, asked_at=asked_at)
    state = await queries.approval_state(store, run_id, call_id)
    if state is None:
        return Decision(won, None, None)
    question = not won and await queries.is_question(store, run_id, call_id)
    return Decision(won, state["state"], state["decided_by"], question)


async def answer(
    store: Store, run_id: str, text: str, *, by: str, tell: Tell, question_id: str | None = None
) -> PendingQuestion | None:
    """The run's waiting question (the oldest, or the one named by `question_id`) gets this
    answer: the question answered, None if it was not waiting (answered, withdrawn, never
    asked). `NotOffered` if the question does not take it (`PendingQuestion.refusal`: the run
    would not carry it out); `RunEnded` if the run ended (nothing recorded either way)."""
    waiting = await entries.pending_questions(store, run_id)
    if question_id is not None:
        waiting = [question for question in waiting if question.call_id == question_id]
    if not waiting:  # the store still refuses it for a run that ended or a runner gone;
        # an id no question has answers nothing that came since
        await deciding.answer(store, run_id, text, by, question_id=question_id or "", tell=tell)
        return None
    question = waiting[0]
    if problem := question.refusal(text):
        said = f"run {run_id}'s question {question.call_id}: {problem}; nothing was answered"
        raise NotOffered(said)
    won = await deciding.answer(store, run_id, text, by, question_id=question.call_id, tell=tell)
    return question if won else None


async def resolve(
    store: Store, run_id: str, call_id: str, *, applied: bool, by: str, tell: Tell
) -> str | None:
    """The operator's word on a write whose outcome is unknown: None when recorded, else
    why not (`store/deciding.py`: one winner)."""
    return await deciding.resolve(store, run_id, call_id, applied=applied, by=by, tell=tell)


async def resolve_ended(
    location: Location | None, run_id: str, call_id: str, *, applied: bool, by: str, tell: Tell
) -> OutcomeResolved | str | None:
    """`resolve` for a run that has ended, whose own connection closed with it: the store
    opened as `loopdeck resolve` opens it. The event the store wrote (a console shows it), why
    not (a str), or None when taken but the store had the run live (its runner is sent it)."""
    async with opened(location, notes=tell) as store:
        why = await resolve(store, run_id, call_id, applied=applied, by=by, tell=tell)
        if why is not None:
            return why
        from loopdeck.core.events import OutcomeResolved

        made = await queries.last_event(store, run_id, OutcomeResolved)
    return made if made is not None and made.call_id == call_id else None


async def unknown_outcomes(store: Store, run_id: str | None = None) -> list[PendingOutcome]:
    """Approved writes whose outcome nobody knows (crashed runners marked first)."""
    await queries.mark_crashed_runners(store)
    return await entries.unknown_outcomes(store, run_id)


async def grants(store: Store, run_id: str | None = None) -> list[GrantRow]:
    """Every grant of the run (or of every run), with its uses and state."""
    from loopdeck.operator.grant_book import GrantBook

    book = GrantBook()
    for event in await outcome_queries.grant_events(store, run_id):
        book.take(event)
    ended = {
        run["run_id"]
        for run in await queries.all_runs(store)
        if run["state"] not in queries.LIVE_STATES
    }
    for run in ended:
        book.ended(run)
    return list(book.rows.values())


async def revoke(store: Store, run_id: str, grant_id: str, by: str) -> str | None:
    """The grant withdrawn by its live run (a command it reads): None when sent, else why
    not (no such grant, no longer active)."""
    row = next((g for g in await grants(store, run_id) if g.grant_id == grant_id), None)
    if row is None:
        return f"run {run_id} has no grant {grant_id}"
    if not row.active:
        return f"grant {grant_id} is {row.state()}: nothing to revoke"
    await queries.send_command(store, run_id, queries.REVOKE, by, {"grant_id": grant_id})
    return None


async def waiting_writes(store: Store, run_id: str) -> list[str]:
    """The call ids of the run's writes waiting for approval."""
    return [row["call_id"] for row in await queries.pending_approvals(store, run_id)]


async def send_command(
    store: Store, run_id: str, verb: str, by: str, tell: Tell = deciding.untold
) -> deciding.StopHeld | None:
    """`cancel` or `kill` sent: None, or why it is not taken at once (`deciding.stop`)."""
    return await deciding.stop(store, run_id, verb, by, tell=tell)


async def pause_or_resume(store: Store, run_id: str, verb: str, by: str, tell: Tell) -> str | None:
    """`pause` or `resume` sent (None), or why the run would do nothing with it."""
    return await deciding.pause_or_resume(store, run_id, verb, by, tell=tell)


async def send_message(store: Store, run_id: str, text: str, by: str, tell: Tell) -> None:
    """The operator's message to the run's agent, refused when no runner will hear it."""
    await deciding.send_message(store, run_id, text, by, tell=tell)


async def event_bodies(store: Store, run_id: str) -> AsyncIterator[str]:
    """Every stored event of the run, in order, as `export` writes it: its JSON body with its
    hash in the run's chain (and its row's origin) as its last fields."""
    async for line in exported_lines(store, run_id):
        yield line
