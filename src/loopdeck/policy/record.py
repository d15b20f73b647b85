"""A recorded run read for its decisions: each ask of a call (`Ask`), with the facts a policy's
rules read of it, made from the events as the runtime made them (the call as proposed, the
arguments asked about, the budgets as last published, the guard's repeats and the tools read
before it), or, where the run had a policy, as its `PolicyDecided` recorded them; and what
was decided, by whom.

The facts made here are the policy's own input less what a policy makes of them (`run.tainted`
from its `untrusted`, each rule's uses and age): the same facts replayed under another
policy give what it would have decided.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.events import (
    ApprovalDecided,
    ApprovalRequested,
    BudgetUpdated,
    CallProposed,
    Event,
    GrantGiven,
    GrantRevoked,
    GuardTripped,
    PolicyDecided,
    PolicyInForce,
    RunStarted,
    ToolFinished,
)
from loopdeck.core.policy_gate import READ_STATUSES, Effect, fractions, tool_name

Recorded = Literal["allow", "deny", "ask", "refused"]


@dataclass
class Ask:
    """One ask of a call, and what became of it."""

    call_id: str
    seq: int
    request: ApprovalRequested
    facts: dict[str, Any]  # as a policy reads them, less what a policy makes of them
    first: bool  # the call's first ask (a grant answers only a first ask)
    policy: PolicyDecided | None = None  # the verdict recorded, when the run had a policy
    decided: ApprovalDecided | None = None

    @property
    def decided_by(self) -> DecidedBy | None:
        if self.decided is None:
            return None
        return self.decided.decided_by or DecidedBy.of(self.decided.by)

    @property
    def effect(self) -> Recorded:
        """What happened: allowed or denied by a rule or grant, asked of someone, or refused
        by loopdeck itself (no policy decides that)."""
        by = self.decided_by
        if by is not None and by.who == "loopdeck":
            return "refused"
        if by is not None and by.who in ("rule", "grant") and self.decided is not None:
            return "allow" if self.decided.approved else "deny"
        return "ask"

    def words(self) -> str:
        """`asked, approved by operator alice via cli` / `allowed by rule src (env …)`."""
        by = self.decided_by
        said = {"allow": "allowed", "deny": "denied", "ask": "asked", "refused": "refused"}
        head = said[self.effect]
        if self.effect == "ask":
            if self.decided is None or by is None:
                return "asked, nobody decided"
            verb = "approved" if self.decided.approved else "rejected"
            return f"asked, {verb} by {by.words()}"
        return f"{head} by {by.words()}" if by else head


@dataclass
class RunRecord:
    run_id: str
    started: RunStarted | None
    in_force: PolicyInForce | None
    asks: list[Ask] = field(default_factory=list)
    grant_events: list[GrantGiven | GrantRevoked] = field(default_factory=list)

    def asks_of(self, call_id: str) -> list[Ask]:
        return [ask for ask in self.asks if ask.call_id == call_id]


@dataclass
class _Fold:
    """What the run had done at each point, as the events go."""

    kind: str = ""
    proposed: dict[str, CallProposed] = field(default_factory=dict)
    usage: dict[str, tuple[float, float]] = field(default_factory=dict)
    repeats: int = 0
    read: dict[str, None] = field(default_factory=dict)
    policy: dict[str, PolicyDecided] = field(default_factory=dict)
    asked: set[str] = field(default_factory=set)


def read_run(run_id: str, events: list[Event]) -> RunRecord:
    record = RunRecord(run_id, None, None)
    fold = _Fold()
    for event in events:
        match event:
            case RunStarted():
                record.started = event
            case PolicyInForce():
                record.in_force, fold.kind = event, event.run_kind
            case CallProposed():
                fold.proposed[event.call_id] = event
            case BudgetUpdated():
                fold.usage = event.usage
            case GuardTripped():
                fold.repeats += 1
            case ToolFinished() if event.status in READ_STATUSES:
                fold.read.setdefault(tool_name(event.tool), None)
            case PolicyDecided():
                fold.policy[event.call_id] = event
            case ApprovalRequested():
                record.asks.append(_ask(record, fold, event))
            case ApprovalDecided():
                ask = next((a for a in reversed(record.asks) if a.call_id == event.call_id), None)
                if ask is not None and ask.decided is None:
                    ask.decided = event
            case GrantGiven() | GrantRevoked():
                record.grant_events.append(event)
    return record


def _ask(record: RunRecord, fold: _Fold, request: ApprovalRequested) -> Ask:
    policy = fold.policy.pop(request.call_id, None)
    first = request.call_id not in fold.asked
    fold.asked.add(request.call_id)
    proposed = fold.proposed.get(request.call_id)
    if policy is not None and policy.facts:
        facts = _as_asked(policy.facts, request)
    else:
        facts = _folded(record, fold, request, proposed)
    return Ask(request.call_id, request.seq, request, facts, first, policy)


def _as_asked(recorded: dict[str, Any], request: ApprovalRequested) -> dict[str, Any]:
    """Recorded facts back as a policy reads them: the request's arguments in, and what the
    recording policy made of them out."""
    call = {k: v for k, v in recorded["call"].items() if k != "args_sha256"}
    run = {k: v for k, v in recorded["run"].items() if k != "tainted"}
    facts = {k: v for k, v in recorded.items() if k != "rules"}
    return {**facts, "call": {**call, "args": request.args}, "run": run}


def _folded(
    record: RunRecord, fold: _Fold, request: ApprovalRequested, proposed: CallProposed | None
) -> dict[str, Any]:
    """The facts of an ask no policy recorded, made from the events before it."""
    shown = proposed.tool if proposed else request.tool
    state = request.state_hash
    before = proposed.state_hash if proposed else state
    return {
        "call": {
            "id": request.call_id,
            "tool": tool_name(shown),
            "title": shown,
            "args": request.args,
            "risk": proposed.risk if proposed else "write",
            "risk_source": request.risk_source,
            "kind": fold.kind,
        },
        "state": {"hash": state, "proposed": before, "unchanged": state == before},
        "run": {
            "id": record.run_id,
            "env": record.started.env if record.started else "",
            "round": proposed.round if proposed else 0,
            "budget": fractions(fold.usage),
            "repeats": fold.repeats,
            "read": list(fold.read),
        },
        "time": request.requested_at.isoformat(),
    }


def effect_words(effect: Effect | Recorded, by: DecidedBy | None) -> str:
    """What a policy would do, in the words `Ask.words` uses for what was done."""
    if effect in ("none", "ask") and by is None:
        return "asked (no rule decides)"
    said = {"allow": "allowed", "deny": "denied", "ask": "asked", "none": "asked"}
    return f"{said.get(effect, effect)} by {by.words()}" if by else said.get(effect, effect)
