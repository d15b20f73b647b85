"""A recorded run's decisions under a policy: `replay` (every ask, in order, its rules' uses
counted as they would have been, the run's standing grants in force from when they were given
until revoked or used up) and `explain` (one call's asks, every rule's outcome: under the
policy the run recorded, on the facts it recorded, or under another).

A rule's or grant's decision is counted as the run counts it (`core/policy_gate.Ruling.taken`):
only where it is taken. Where the run took the operator's decision on an earlier asking
instead (recorded `on_earlier_ask`), and it stands over the ruling (`over_ruling`), the ask
replays as that decision, and the rule or grant is not spent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.asked_on import over_ruling
from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.events import GrantGiven
from loopdeck.core.grant_rules import GrantRule
from loopdeck.core.grants import Grant
from loopdeck.core.policy_gate import Effect
from loopdeck.policy.engine import Evaluation, Policy, Rule, RuleBook
from loopdeck.policy.loading import read_level, recorded_level
from loopdeck.policy.record import Ask, RunRecord, effect_words


@dataclass(frozen=True)
class Replayed:
    ask: Ask
    evaluation: Evaluation | None  # None: refused by loopdeck itself, no policy asked
    effect: Effect  # what the policy would do: allow, deny or ask (someone decides)
    by: DecidedBy | None  # the rule (or grant) that would decide; None: nobody, the default

    @property
    def differs(self) -> bool:
        return self.evaluation is not None and self.ask.effect != self.effect

    def words(self) -> str:
        return effect_words(self.effect, self.by)

    def json(self) -> dict[str, Any]:
        return {
            "call_id": self.ask.call_id,
            "tool": self.ask.facts["call"]["title"],
            "recorded": self.ask.effect,
            "recorded_by": self.ask.decided_by.flat() if self.ask.decided_by else None,
            "would": self.effect,
            "would_by": self.by.flat() if self.by else None,
            "differs": self.differs,
        }


class _Grants:
    """The run's standing grants as they stood at each ask, their uses counted by the replay."""

    def __init__(self, record: RunRecord) -> None:
        self.events = list(record.grant_events)
        self.given: dict[str, Grant] = {}

    def until(self, seq: int) -> None:
        while self.events and self.events[0].seq < seq:
            event = self.events.pop(0)
            if isinstance(event, GrantGiven):
                rule = GrantRule.model_validate(
                    {"scope": event.scope, "fields": event.fields, "uses": event.uses}
                )
                self.given[event.grant_id] = Grant(
                    event.grant_id, event.tool, rule, event.args, event.by, event.expires_at,
                    event.uses,
                )  # fmt: skip
            elif (grant := self.given.get(event.grant_id)) is not None:
                grant.revoked_by = event.by

    def covering(self, tool: str, args: dict[str, Any], at: datetime) -> Grant | None:
        return next((g for g in self.given.values() if g.covers(tool, args, at)), None)

    @staticmethod
    def use(grant: Grant) -> None:
        if grant.uses_left is not None:
            grant.uses_left -= 1


def replay(record: RunRecord, policy: Policy) -> list[Replayed]:
    """Every ask of the run as `policy` would have decided it."""
    in_force = record.in_force
    since = in_force.rules_since if in_force is not None else None  # a fork's: its source's
    if since is None:
        since = record.started.at if record.started else _first_time(record)
    book = RuleBook(since)
    grants = _Grants(record)
    replayed = []
    for ask in record.asks:
        grants.until(ask.seq)
        if ask.effect == "refused":
            replayed.append(Replayed(ask, None, "deny", ask.decided_by))
            continue
        evaluation = policy.evaluate(ask.facts, book)
        effect, by = evaluation.effect, evaluation.verdict().decided_by
        ruled, grant = effect in ("allow", "deny") and by is not None, None
        if not ruled:  # an ask, or a shadow rule's say: counted, nothing stands over it
            book.decided(evaluation)
        if effect == "none" or by is None:
            call = ask.facts["call"]
            at = datetime.fromisoformat(str(ask.facts["time"]))
            grant = grants.covering(call["tool"], call["args"], at) if ask.first else None
            effect = "allow" if grant else "ask"
            by = (
                DecidedBy(who="grant", grant_id=grant.grant_id, granted_by=grant.by)
                if grant
                else None
            )
        if (ruled or grant) and _overruled(ask, effect == "allow"):
            replayed.append(Replayed(ask, evaluation, "ask", ask.decided_by))
            continue
        if ruled:
            book.decided(evaluation)
        if grant is not None:
            grants.use(grant)
        replayed.append(Replayed(ask, evaluation, effect, by))
    return replayed


def _overruled(ask: Ask, approves: bool) -> bool:
    """Whether the operator's decision on an earlier asking, which the run recorded taking
    for this ask, stands over a ruling that `approves` (or denies) it."""
    decided = ask.decided
    if decided is None or decided.on_earlier_ask < 1:
        return False
    found = ApprovalDecision(call_id=ask.call_id, approved=decided.approved, by=decided.by)
    ruled = ApprovalDecision(call_id=ask.call_id, approved=approves, by="rule")
    return over_ruling(found, ruled) is found


def recorded_policy(record: RunRecord) -> Policy | None:
    """The policy the run was decided under, read again from the text it recorded."""
    if record.in_force is None:
        return None
    return Policy([recorded_level(level) for level in record.in_force.levels])


@dataclass(frozen=True)
class RecordedMemory:
    """Each rule's own attributes as one ask recorded them."""

    rules: dict[str, dict[str, Any]]

    def uses(self, rule: Rule) -> int:
        return int(self.rules.get(rule.key, {}).get("uses", 0))

    def age_s(self, rule: Rule, at: datetime) -> float:
        return float(self.rules.get(rule.key, {}).get("age_s", 0.0))

    def last_state(self, rule: Rule) -> str:
        return str(self.rules.get(rule.key, {}).get("last_state", ""))


def explain(record: RunRecord, call_id: str, other: Policy | None = None) -> list[Replayed]:
    """The call's asks, each with every rule's outcome: under `other` (the whole run replayed
    up to it), else under the policy the run recorded, on the facts it recorded."""
    if other is not None:
        return [done for done in replay(record, other) if done.ask.call_id == call_id]
    policy = recorded_policy(record)
    explained = []
    for ask in record.asks_of(call_id):
        if policy is None or ask.policy is None:
            explained.append(Replayed(ask, None, _as_effect(ask), ask.decided_by))
            continue
        evaluation = policy.evaluate(ask.facts, RecordedMemory(ask.policy.facts.get("rules", {})))
        explained.append(Replayed(ask, evaluation, _as_effect(ask), ask.decided_by))
    return explained


def _as_effect(ask: Ask) -> Effect:
    return "deny" if ask.effect == "refused" else ask.effect


def _first_time(record: RunRecord) -> datetime:
    return record.asks[0].request.requested_at if record.asks else datetime.now().astimezone()


def policy_at(path: Path) -> Policy:
    """A policy file to replay or explain under, as the run's own level, its tests passed."""
    return Policy([read_level("run", path)])
