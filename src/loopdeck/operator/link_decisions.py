"""A decision taken on a link's page: through the store like any other (`store/deciding.py`:
one winner, a locked store waited out, a run that ended or a runner gone refused), recorded
as decided by `link`, and checked against the store just before: a link whose decision was
taken, withdrawn, or asked again since it was made decides nothing (the page shows why, or
the new ask to decide again).

Then the page waits a little for the run to carry it out, so it can say what happened: the
write ran, or its state had moved and the run asks again (the approval never applied: the
receipt is bound to the state), or the run stopped.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Literal

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.questions import ANSWER_CAP
from loopdeck.core.text import capped
from loopdeck.core.write_approvals import REASON_CAP
from loopdeck.operator.arg_edits import check_edit
from loopdeck.operator.link_evidence import Evidence, LinkPage, RunShown, page_for
from loopdeck.operator.link_tokens import LinkClaim, LinkServer
from loopdeck.operator.records import not_offered
from loopdeck.store import deciding, queries
from loopdeck.store.base import Store, StoreError

BY_LINK = "link"  # who decided, as the store records it: an operator through a link
CARRIED_OUT_S = 20.0  # how long the page waits for the run to act on the decision
LOOK_EVERY_S = 0.2
Action = Literal["approve", "edit", "reject", "answer", "applied", "not-applied"]


@dataclass(frozen=True)
class LinkChoice:
    """What the person chose on the page, and the words of that choice's own box (a reason,
    an answer, an edit's JSON). `stray`: words that came in another choice's box, said so
    (the choice is refused: they were meant for something else)."""

    action: Action
    text: str = ""
    stray: str = ""


async def decide_by_link(
    store: Store, server: LinkServer, claim: LinkClaim, choice: LinkChoice
) -> LinkPage:
    """The choice taken for the claim's decision, if it still stands open; the page after."""
    page = await page_for(store, server, claim)
    if page.standing != "open" or page.evidence is None:
        return page
    last = await _last_seq(store, claim.run_id)
    try:
        said = await _taken(store, claim, choice, page)
    except (StoreError, ValueError) as exc:
        typed = choice.text if choice.action == "edit" else None
        words = f"Nothing was decided: {exc}"
        return LinkPage("open", words, page.run, page.evidence, claim, typed=typed)
    if said is not None:
        return said
    if claim.what != "approval":
        return LinkPage("decided", _done(choice), await _run_now(store, server, claim), done=True)
    return await _carried_out(store, server, claim, choice, last)


async def _taken(
    store: Store, claim: LinkClaim, choice: LinkChoice, page: LinkPage
) -> LinkPage | None:
    """None once the decision is the one recorded; else the page saying why not."""
    run_id, call_id = claim.run_id, claim.call_id
    if choice.stray:
        raise ValueError(f"{choice.stray}. Each choice takes only the words in its own box")
    if claim.what == "approval" and choice.action in ("approve", "edit", "reject"):
        decision = link_approval(call_id, choice, page.evidence)
        won = await deciding.decide(store, run_id, decision, asked_at=page.asked_at)
    elif claim.what == "question" and choice.action == "answer":
        evidence = page.evidence
        if evidence is not None and (
            problem := not_offered(evidence.choices, choice.text, evidence.cap, evidence.used)
        ):
            return LinkPage("open", f"Nothing was decided: {problem}.", page.run, evidence, claim)
        won = await deciding.answer(store, run_id, choice.text, BY_LINK, question_id=call_id)
    elif claim.what == "outcome" and choice.action in ("applied", "not-applied"):
        applied = choice.action == "applied"
        why = await deciding.resolve(store, run_id, call_id, applied=applied, by=BY_LINK)
        won = why is None
    else:
        raise ValueError(f"{choice.action!r} does not decide this {claim.what}")
    if won:
        return None
    return _lost(page)


def link_approval(call_id: str, choice: LinkChoice, asked: Evidence | None) -> ApprovalDecision:
    """The approval or rejection the page's choice makes: an edit checked as `loopdeck
    approve --args` checks it (`check_edit`, against the tool's schema; never on a call that
    cannot carry an edit out), one as proposed a plain approval (as the console makes it).
    ValueError: an edit that cannot be taken, what is wrong with it named."""
    if choice.action == "reject":
        rejected = ApprovalDecision(call_id=call_id, approved=False, by=BY_LINK, reason=choice.text)
        return rejected.with_reason()
    edited = None
    if choice.action == "edit":
        if asked is None or not asked.editable:
            why = asked.not_editable if asked and asked.not_editable else "it takes no arguments"
            raise ValueError(f"{call_id} cannot be approved with other arguments: {why}")
        edited, problem = check_edit(choice.text, asked.args_schema)
        if edited is None:
            raise ValueError(f"the edited arguments were refused: {problem}")
        edited = None if edited == asked.args else edited
    return ApprovalDecision(call_id=call_id, approved=True, by=BY_LINK, args=edited)


def _lost(page: LinkPage) -> LinkPage:
    return LinkPage("decided", "Someone else decided it first: yours was not recorded.", page.run)


def _done(choice: LinkChoice, told: str | None = None) -> str:
    """What was decided, in the words the run keeps: a reason as the model is told it
    (`told`, as recorded, else cut as the run cuts it), an answer as the run records it."""
    match choice.action:
        case "approve":
            return "Approved."
        case "edit":
            return "Approved with the arguments you sent."
        case "reject":
            reason = capped(choice.text, REASON_CAP) if told is None else told
            return "Rejected: the model is told" + (f": {reason}" if reason else ".")
        case "answer":
            return f"Answered: {capped(choice.text, ANSWER_CAP)}"
    return f"Recorded: {choice.action.replace('-', ' ')}."


async def _last_seq(store: Store, run_id: str) -> int:
    row = await queries.run_row(store, run_id)
    return int(row["last_seq"] or 0) if row else 0


async def _run_now(store: Store, server: LinkServer, claim: LinkClaim) -> RunShown | None:
    """The run as the store has it now, after the decision (not as it was asked)."""
    return (await page_for(store, server, claim)).run


async def _carried_out(
    store: Store, server: LinkServer, claim: LinkClaim, choice: LinkChoice, after: int
) -> LinkPage:
    """What the run did with the approval or rejection: waited for, within a bound."""
    end = time.monotonic() + CARRIED_OUT_S
    while time.monotonic() < end:
        for row in await queries.events_after(store, claim.run_id, after):
            after = int(row["seq"])
            body = json.loads(row["body"])
            if body.get("call_id") != claim.call_id and row["kind"] != "run_stopped":
                continue
            match row["kind"]:
                case "tool_finished":
                    said = f"{_done(choice)} It ran: {body['status']}."
                case "approval_decided" if not body.get("approved"):
                    said = _done(choice, str(body.get("reason") or ""))  # as the model reads it
                case "approval_invalidated" | "approval_requested":
                    page = await page_for(store, server, claim)
                    if page.standing in ("moved", "open"):
                        return page
                    continue
                case "run_stopped":
                    said = f"{_done(choice)} The run then stopped ({body.get('stop_reason')})."
                case _:
                    continue
            return LinkPage("decided", said, await _run_now(store, server, claim), done=True)
        await asyncio.sleep(LOOK_EVERY_S)
    said = f"{_done(choice)} Recorded; the run has not carried it out yet."
    return LinkPage("decided", said, await _run_now(store, server, claim), done=True)
