"""What a decision link's page shows, read from the store as it stands now: the run, and the
decision's evidence (a write's arguments, diff, rationale and the state it was asked in; a
question's words and the guard's or a budget's evidence; a write whose outcome is unknown),
or why the link decides nothing any more (decided, asked again, withdrawn with its run). A
write whose outcome is unknown takes its word after its run ended, as `loopdeck resolve` does.

Whatever the push said, the page says what the store says now: a call asked again since the
push (its state moved, its request expired) is shown as the new ask, to be decided again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from loopdeck.caps import Cap
from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.push_events import PushedWhat
from loopdeck.operator.entries import paused_cap
from loopdeck.operator.link_tokens import OUTCOME_ASK, LinkClaim, LinkServer, ask_of_request
from loopdeck.store import queries
from loopdeck.store.base import INVALIDATED, Store

# open: decide it here; moved: asked again since the link was made, decide the new ask here;
# decided: taken (by whom, how); withdrawn: its run stopped first; unknown: not in this store;
# expired: the link is past its time and its ask still waits (shown, decided elsewhere).
Standing = Literal["open", "moved", "decided", "withdrawn", "unknown", "expired"]
DECIDED = ("approved", "rejected", "answered")
KEPT = "your word on this write is still kept in its record."
# Why an approval the run took no longer held, and what comes of it.
MOVED = (
    "the call's state or arguments moved since; the run asks again (or stopped after its last ask)"
)


@dataclass(frozen=True)
class Evidence:
    """One decision as the page shows it."""

    what: PushedWhat
    call_id: str
    headline: str
    tool: str = ""
    args: dict[str, Any] | None = None
    diff: str = ""
    rationale: str = ""
    state_hash: str = ""
    asked_again: str = ""
    question: str = ""
    choices: tuple[str, ...] = ()
    evidence: tuple[tuple[str, str], ...] = ()
    expires_at: datetime | None = None
    cap: Cap | None = None  # a budget's pause: its cap and what it had used
    used: float | None = None
    args_schema: dict[str, Any] = field(default_factory=dict)  # what an edit is checked against
    not_editable: str = ""  # why the call cannot run an edit ("" when it can)

    @property
    def editable(self) -> bool:
        """A write whose tool takes arguments the run can carry out edited."""
        takes = bool(self.args) or bool(self.args_schema.get("properties"))
        return self.what == "approval" and takes and not self.not_editable


@dataclass(frozen=True)
class RunShown:
    run_id: str
    env: str
    state: str
    stop_reason: str
    budgets: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.state in queries.LIVE_STATES


@dataclass(frozen=True)
class LinkPage:
    """The page for a link: where its decision stands (`standing`), in words; the evidence
    and the claim a form on it decides (`open`, `moved`)."""

    standing: Standing
    words: str
    run: RunShown | None = None
    evidence: Evidence | None = None
    claim: LinkClaim | None = None
    done: bool = False  # the words say what became of a decision taken on this page
    asked_at: str | None = None  # an open write's asking, as stored: a decision binds to it
    typed: str | None = None  # an edit refused: shown again in its box, to be put right


def _run(row: dict[str, Any]) -> RunShown:
    usage = json.loads(row["usage"]) if row.get("usage") else {}
    env = f"{row.get('env') or ''}" + (f"/{row['script']}" if row.get("script") else "")
    budgets = {name: (float(v[0]), float(v[1])) for name, v in usage.items()}
    return RunShown(row["run_id"], env, row["state"] or "", row.get("stop_reason") or "", budgets)


def who(by: str | None) -> str:
    return DecidedBy.of(by).words() if by else "someone"


async def page_for(store: Store, server: LinkServer, claim: LinkClaim) -> LinkPage:
    """Where the claim's decision stands in the store now."""
    row = await queries.run_row(store, claim.run_id)
    if row is None:
        return LinkPage("unknown", "This server's store has no such run: the link is not for it.")
    run = _run(row)
    match claim.what:
        case "approval":
            return await _approval(store, server, claim, run)
        case "question":
            return await _question(store, claim, run)
    return await _outcome(store, claim, run)


def _withdrawn(run: RunShown) -> LinkPage:
    ended = run.stop_reason or run.state
    words = f"The run stopped ({ended}) before anyone decided: this link is withdrawn."
    return LinkPage("withdrawn", words, run)


async def _approval(store: Store, server: LinkServer, claim: LinkClaim, run: RunShown) -> LinkPage:
    row = await queries.approval_state(store, claim.run_id, claim.call_id)
    request = await queries.approval_request(store, claim.run_id, claim.call_id)
    if row is None or request is None:
        return LinkPage("unknown", "This run never asked for that decision.", run)
    asked_at = datetime.fromisoformat(request["requested_at"])
    ask = ask_of_request(claim.call_id, request["args_sha256"], request["state_hash"], asked_at)
    if row["state"] in DECIDED:
        again = "" if ask == claim.ask else " (asked again since the link was sent)"
        said = f"Already decided{again}: {row['state']} by {who(row['decided_by'])}."
        return LinkPage("decided", said, run)
    if row["state"] == INVALIDATED:
        said = f"Approved by {who(row['decided_by'])}, and the approval no longer held: {MOVED}."
        return LinkPage("decided", said, run)
    if row["state"] != "pending" or not run.live:
        return _withdrawn(run)
    evidence = _write(request)
    if ask == claim.ask:  # its row read as the same asking: the decision is of that one
        same = datetime.fromisoformat(row["requested_at"]) == asked_at
        return LinkPage(
            "open", "", run, evidence, claim, asked_at=row["requested_at"] if same else None
        )
    expires = evidence.expires_at or datetime.fromtimestamp(claim.until)
    moved = server.claim(claim.run_id, claim.call_id, ask, "approval", int(expires.timestamp()))
    why = request.get("asked_again") or "the call was asked again"
    said = f"Asked again since the link was sent ({why}): here is the new ask. Decide again."
    return LinkPage("moved", said, run, evidence, moved)


def _write(request: dict[str, Any]) -> Evidence:
    return Evidence(
        what="approval",
        call_id=request["call_id"],
        headline=f"approve {request['tool']} (write)",
        tool=request["tool"],
        args=dict(request.get("args") or {}),
        diff=str(request.get("diff") or ""),
        rationale=str(request.get("rationale") or ""),
        state_hash=str(request.get("state_hash") or ""),
        asked_again=str(request.get("asked_again") or ""),
        expires_at=datetime.fromisoformat(request["expires_at"]),
        args_schema=dict(request.get("args_schema") or {}),
        not_editable=str(request.get("not_editable") or ""),
    )


async def _question(store: Store, claim: LinkClaim, run: RunShown) -> LinkPage:
    row = await queries.approval_state(store, claim.run_id, claim.call_id)
    asked = await queries.question_asked(store, claim.run_id, claim.call_id)
    if row is None or asked is None:
        return LinkPage("unknown", "This run never asked that question.", run)
    if row["state"] == "answered":
        said = f"Already answered by {who(row['decided_by'])}: {row['reason'] or ''!s}"
        return LinkPage("decided", said, run)
    if row["state"] != "pending" or not run.live:
        return _withdrawn(run)
    acts_at = asked.get("acts_at")
    evidence = Evidence(
        what="question",
        call_id=claim.call_id,
        headline=str(asked.get("title") or "The agent asks"),
        question=str(asked.get("question") or ""),
        choices=tuple(asked.get("choices") or ()),
        evidence=tuple((str(k), str(v)) for k, v in asked.get("evidence") or ()),
        expires_at=datetime.fromisoformat(acts_at) if acts_at else None,
        **paused_cap(asked),
    )
    return LinkPage("open", "", run, evidence, claim)


async def _outcome(store: Store, claim: LinkClaim, run: RunShown) -> LinkPage:
    row = await queries.approval_state(store, claim.run_id, claim.call_id)
    if row is None or claim.ask != OUTCOME_ASK:
        return LinkPage("unknown", "This run has no such write.", run)
    if row["outcome"] not in queries.UNKNOWN_OUTCOMES:
        said = f"Already said: its outcome is {row['outcome'] or 'being recorded'}."
        return LinkPage("decided", said, run)
    evidence = Evidence(
        what="outcome",
        call_id=claim.call_id,
        headline=f"did {row['tool']} take effect? Its outcome is unknown",
        tool=str(row["tool"] or ""),
    )
    # The store keeps the word after the run ended (`loopdeck resolve` takes it too): whoever
    # reads the run's record, or picks its work up again, learns whether the write happened.
    ended = "" if run.live else f"The run has ended ({run.stop_reason or run.state}): {KEPT}"
    return LinkPage("open", ended, run, evidence, claim)
