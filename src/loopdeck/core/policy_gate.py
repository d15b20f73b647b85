"""The policy's say on a call, asked at the one place approvals are asked
(`WriteApprovals.ask_once`) before any person: allow (approved by the rule, with a receipt
bound to the arguments and the state like an operator's approval), deny (refused, the model
told the rule and its message), ask (the operator decides, told which rule asked and why), or
nothing (no rule matched: a standing grant, else the run's approver, decides as before).

The runtime knows the facts a rule reads (the call, the state, the run's budgets, repeats and
the tools whose output it has read, the time); the policy itself is `loopdeck/policy/`'s,
reached through `PolicyGate` so that the core imports no expression engine. Every verdict is
recorded (`PolicyDecided`, after the policy in force, `PolicyInForce`, once per run), whether
it is enforced or only said (a shadow level's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal, Protocol

from loopdeck.core.approvals import ApprovalDecision, args_digest
from loopdeck.core.asked_on import over_ruling
from loopdeck.core.budgets import BudgetLedger
from loopdeck.core.config import RunConfig
from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.events import CallStatus, Emit, PolicyDecided, PolicyInForce
from loopdeck.core.grants import Grant, Grants
from loopdeck.core.outcome import CallRecord

Effect = Literal["allow", "deny", "ask", "none"]
# A call whose result is the tool's own output, read by the model (`run.read`).
READ_STATUSES = frozenset({CallStatus.EXECUTED, CallStatus.FAILED})


@dataclass(frozen=True)
class PolicyVerdict:
    effect: Effect  # enforced: none when no rule of an enforced level matched
    decided_by: DecidedBy | None
    would: Effect  # counting the shadow levels too
    would_by: DecidedBy | None
    matched: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)  # as the rules saw them
    # Counts the uses of the rules that decided, once the run takes the verdict: an ask a
    # decision of the operator's stood over is no rule's use (`Ruling.taken`).
    count: Callable[[], None] = field(default=lambda: None, compare=False, repr=False)


class PolicyGate(Protocol):
    """A run's policy, as the runtime asks it."""

    run_kind: str

    def in_force(self) -> dict[str, Any]:
        """`PolicyInForce`'s fields: the levels, their hashes, modes and text."""

    def decide(self, facts: dict[str, Any], grant: Grant | None) -> PolicyVerdict:
        """The verdict on one ask (the rules' uses counted by its `count`), `grant` the
        standing grant that covers the call, if any (listed with the rules, deciding only
        when none does)."""


class Tripwire(Protocol):
    trips: int  # the repeats the no-progress guard caught


class CallBook(Protocol):
    """The run's calls so far, as the facts read them (`CallHandler` is one)."""

    @property
    def records(self) -> Sequence[CallRecord]: ...
    @property
    def guard(self) -> Tripwire: ...


class FactsHost(Protocol):
    config: RunConfig
    ledger: BudgetLedger
    round: int


@dataclass(frozen=True)
class Ruling:
    """What comes before the operator on one ask: a decision already made (by a rule, a
    grant), or the rule that asks the operator (`asked_by`), or neither."""

    decision: ApprovalDecision | None = None
    decided_by: DecidedBy | None = None
    grant: Grant | None = None  # the grant that approved it, its use counted when taken
    asked_by: DecidedBy | None = None
    count: Callable[[], None] = field(default=lambda: None, compare=False, repr=False)

    def taken(self, found: ApprovalDecision | None) -> ApprovalDecision:
        """What the run takes for the ruling's `decision`: `found`, a decision the store took
        on an earlier asking, where it stands over the ruling (`over_ruling`), else the
        ruling's, its rule's or grant's use counted only then (it decided the ask)."""
        assert self.decision is not None
        took = over_ruling(found, self.decision)
        if took is self.decision:
            self.count()
        return took


class PolicyStep:
    def __init__(self, host: FactsHost, emit: Emit, grants: Grants, gate: PolicyGate | None):
        self.host = host
        self.emit = emit
        self.grants = grants
        self.gate = gate
        self._announced = False

    def ruling(
        self,
        record: CallRecord,
        calls: CallBook,
        tool: str,
        args: dict[str, Any],
        asked_again_in: str | None,
    ) -> Ruling:
        """The policy's say on this ask (the first, or `asked_again_in` a state found changed);
        without a policy, a grant that covers a first ask approves it, as it always did."""
        grant = None if asked_again_in is not None else self.grants.find(tool, args)
        if self.gate is None:
            return self._granted(record, grant)
        if not self._announced:
            self._announced = True
            self.emit(PolicyInForce, run_id=self.host.config.run_id, **self.gate.in_force())
        # A first ask is about the state the call was proposed in (its receipt is bound to
        # it); a state that moved is found at dispatch and asked again, with `unchanged` false.
        state = asked_again_in if asked_again_in is not None else record.state_hash
        facts = self.facts(record, calls, tool, args, state)
        verdict = self.gate.decide(facts, grant)
        self.emit(
            PolicyDecided, run_id=self.host.config.run_id, call_id=record.call_id,
            effect=verdict.effect, decided_by=verdict.decided_by, would=verdict.would,
            would_by=verdict.would_by, matched=list(verdict.matched),
            errors=list(verdict.errors), grant_id=grant.grant_id if grant else None,
            facts=recorded(verdict.facts),
        )  # fmt: skip
        ruled = verdict.decided_by
        if verdict.effect == "none" or ruled is None:
            verdict.count()  # a shadow level's rule, if any: it only says what it would decide
            return self._granted(record, grant)
        if verdict.effect == "ask":
            verdict.count()  # the rule hands the call to the operator: nothing stands over that
            return Ruling(asked_by=ruled)
        if verdict.effect == "allow":
            made = ApprovalDecision(call_id=record.call_id, approved=True, by=ruled.words())
            return Ruling(made, ruled, count=verdict.count)
        reason = f"denied by policy rule {ruled.rule_id}" + (f": {ruled.why}" if ruled.why else "")
        made = ApprovalDecision(
            call_id=record.call_id, approved=False, reason=reason, by=ruled.words()
        )
        return Ruling(made, ruled, count=verdict.count)

    def _granted(self, record: CallRecord, grant: Grant | None) -> Ruling:
        if grant is None:
            return Ruling()
        by = DecidedBy(who="grant", grant_id=grant.grant_id, granted_by=grant.by)
        made = ApprovalDecision(call_id=record.call_id, approved=True, by=grant.approver())
        return Ruling(made, by, grant, count=partial(self.grants.use, grant))

    def facts(
        self, record: CallRecord, calls: CallBook, tool: str, args: dict[str, Any], state: str
    ) -> dict[str, Any]:
        """What a rule reads of this ask, but its own uses and age and what the policy makes
        of them (`run.tainted`, `state.unchanged_since_rule`): `loopdeck/policy/`'s."""
        host = self.host
        return {
            "call": {
                "id": record.call_id,
                "tool": tool,
                "title": record.tool,
                "args": args,
                "risk": record.risk,
                "risk_source": record.risk_source,
                "kind": self.gate.run_kind if self.gate else "",
            },
            "state": {
                "hash": state,
                "proposed": record.state_hash,
                "unchanged": state == record.state_hash,
            },
            "run": {
                "id": host.config.run_id,
                "env": host.config.env,
                "round": host.round,
                "budget": fractions(host.ledger.usage()),
                "repeats": calls.guard.trips,
                "read": tools_read(calls.records, record.call_id),
            },
            "time": datetime.now(UTC).isoformat(),
        }


def recorded(facts: dict[str, Any]) -> dict[str, Any]:
    """The facts as `PolicyDecided` keeps them: the call's arguments by their hash (they are
    the request's, `ApprovalRequested.args`, recorded beside it), not a third copy."""
    call = dict(facts["call"])
    call["args_sha256"] = args_digest(call.pop("args"))
    return {**facts, "call": call}


def fractions(usage: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Each cap's used fraction of its limit (`run.budget.tokens`: 0.42)."""
    return {cap: round(used / limit, 4) if limit else 0.0 for cap, (used, limit) in usage.items()}


def tools_read(records: Sequence[CallRecord], before: str) -> list[str]:
    """The tools whose own output the model has read (a result, or the tool's error), each
    once, in the order first read: what makes a run tainted."""
    read: dict[str, None] = {}
    for record in records:
        if record.call_id == before:
            break
        if record.status in READ_STATUSES:
            read.setdefault(tool_name(record.tool), None)
    return list(read)


def tool_name(shown: str) -> str:
    """A call's tool as its rule names it: an agent's call shown `edit: calc.py` is `edit`."""
    return shown.split(":")[0]
