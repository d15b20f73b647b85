"""The policy in force: its levels (the user's, the env folder's, the run's), each a file of
rules, combined deny over ask over allow, so that no level can widen what another denies; a
shadow level's rules are evaluated and said (`would`) but decide nothing.

A rule decides a call when its condition holds; among the rules that do, the strongest effect
wins and the broadest level's rule of that effect is the one recorded. A deny or ask rule
whose condition cannot be evaluated asks the operator, naming why: a broken rule never lets
a call through. `evaluate` is pure (the inline tests and a replay run it too); a run's rules'
uses and the states they last allowed are its `RuleBook`'s.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from loopdeck.core.canonical import sha256_hex
from loopdeck.core.decided_by import DecidedBy
from loopdeck.core.policy_gate import Effect, PolicyVerdict
from loopdeck.policy.document import Mode, PolicyCase, RuleEffect
from loopdeck.policy.expressions import (
    Condition,
    ConditionFailed,
    NotABool,
    cel_time,
    cel_value,
)

LEVELS = ("user", "env", "run")  # broadest first
STRENGTH: dict[Effect, int] = {"none": 0, "allow": 1, "ask": 2, "deny": 3}


@dataclass(frozen=True)
class Rule:
    id: str
    effect: RuleEffect
    condition: Condition
    message: str
    level: str
    policy_sha256: str  # its file's
    shadow: bool  # its level only says what it would decide
    when: str = ""  # its condition as written

    @property
    def key(self) -> str:
        return f"{self.level}:{self.id}"

    def ref(self, why: str = "") -> DecidedBy:
        return DecidedBy(
            who="rule", rule_id=self.id, level=self.level, policy_sha256=self.policy_sha256,
            why=why or self.message,
        )  # fmt: skip


@dataclass(frozen=True)
class Level:
    name: str  # user, env or run
    path: Path
    sha256: str  # of the file's bytes
    mode: Mode
    text: str
    untrusted: tuple[str, ...]
    rules: tuple[Rule, ...]
    cases: tuple[PolicyCase, ...]

    def recorded(self) -> dict[str, str]:
        return {"level": self.name, "path": str(self.path), "sha256": self.sha256,
                "mode": self.mode, "text": self.text}  # fmt: skip


class RuleMemory(Protocol):
    """A rule's own attributes: how often it decided in this run, since when it is in force,
    the state it last allowed in."""

    def uses(self, rule: Rule) -> int: ...
    def age_s(self, rule: Rule, at: datetime) -> float: ...
    def last_state(self, rule: Rule) -> str: ...


@dataclass
class RuleBook:
    """A run's memory of its rules (`RuleMemory`), counted as they decide."""

    since: datetime | None = None  # the run's start (`RunStarted`): every rule in force since
    counted: dict[str, int] = field(default_factory=dict)
    allowed_in: dict[str, str] = field(default_factory=dict)

    def start(self, at: datetime) -> None:
        """The run started at `at`, as recorded; a start already known is kept."""
        if self.since is None:
            self.since = at

    def uses(self, rule: Rule) -> int:
        return self.counted.get(rule.key, 0)

    def age_s(self, rule: Rule, at: datetime) -> float:
        if self.since is None:  # asked before any start was recorded: in force from now
            return 0.0
        return max((at - self.since).total_seconds(), 0.0)

    def last_state(self, rule: Rule) -> str:
        return self.allowed_in.get(rule.key, "")

    def decided(self, evaluation: Evaluation) -> None:
        """Each rule that decided (enforced, or what the shadow levels would) used once."""
        state = str(evaluation.facts["state"]["hash"])
        for effect, rule in {(evaluation.effect, evaluation.rule),
                             (evaluation.would, evaluation.would_rule)}:  # fmt: skip
            if rule is None:
                continue
            self.counted[rule.key] = self.counted.get(rule.key, 0) + 1
            if effect == "allow":
                self.allowed_in[rule.key] = state


@dataclass(frozen=True)
class RuleOutcome:
    rule: Rule
    effect: Effect  # what it says here: its own effect, ask when it failed, none
    error: str = ""
    not_a_bool: bool = False  # it failed as its condition gave no bool (`NotABool`)


@dataclass(frozen=True)
class Evaluation:
    effect: Effect
    rule: Rule | None
    would: Effect
    would_rule: Rule | None
    outcomes: tuple[RuleOutcome, ...]
    facts: dict[str, Any]  # as the rules saw them, each rule's own attributes included

    def verdict(self) -> PolicyVerdict:
        return PolicyVerdict(
            effect=self.effect, decided_by=self._ref(self.rule), would=self.would,
            would_by=self._ref(self.would_rule),
            matched=tuple(f"{o.rule.key} ({o.effect})" for o in self.outcomes
                          if o.effect != "none" and not o.error),
            errors=tuple(f"{o.rule.key}: {o.error}" for o in self.outcomes if o.error),
            facts=self.facts,
        )  # fmt: skip

    def _ref(self, rule: Rule | None) -> DecidedBy | None:
        if rule is None:
            return None
        failed = next((o.error for o in self.outcomes if o.rule is rule and o.error), "")
        return rule.ref(f"its condition could not be evaluated: {failed}" if failed else "")


class Policy:
    def __init__(self, levels: list[Level]) -> None:
        self.levels = tuple(sorted(levels, key=lambda level: LEVELS.index(level.name)))
        self.rules = tuple(rule for level in self.levels for rule in level.rules)
        self.untrusted = tuple(glob for level in self.levels for glob in level.untrusted)
        self.sha256 = sha256_hex([[level.name, level.sha256] for level in self.levels])

    def evaluate(
        self,
        facts: dict[str, Any],
        memory: RuleMemory,
        *,
        as_recorded: bool = False,
        bounded: Collection[str] = (),
    ) -> Evaluation:
        """What every rule says of one ask, and what they decide together; `as_recorded`: a
        recorded condition today's load refuses evaluated as its run evaluated it (a rebuild
        from the run's log, a replay of its asks), else it fails (`Condition.holds`), each
        with no step bound but those the record says failed past it (`bounded`: their keys)."""
        facts = self.complete(facts)
        at = datetime.fromisoformat(str(facts["time"]))
        try:
            shared = {name: cel_value(facts[name]) for name in ("call", "run")}
        except RecursionError:  # an argument nested deeper than the facts can be made of
            shared, unread = {}, "the call's arguments are nested too deep to be evaluated"
        else:
            shared["time"], unread = cel_time(at), ""
        outcomes, own = [], {}
        for rule in self.rules:
            attributes = {"id": rule.id, "uses": memory.uses(rule),
                          "age_s": round(memory.age_s(rule, at), 3),
                          "last_state": memory.last_state(rule)}  # fmt: skip
            own[rule.key] = attributes
            if unread:  # as a condition that cannot be evaluated: never lets a call through
                outcomes.append(_failed(rule, unread))
                continue
            state = {
                **facts["state"],
                "unchanged_since_rule": attributes["last_state"] == facts["state"]["hash"],
            }
            activation = {**shared, "state": cel_value(state), "rule": cel_value(attributes)}
            outcomes.append(_outcome(rule, activation, as_recorded, rule.key in bounded))
        enforced = [o for o in outcomes if not o.rule.shadow]
        effect, decider = _strongest(enforced)
        would, would_rule = _strongest(outcomes)
        facts = {**facts, "rules": own}
        return Evaluation(effect, decider, would, would_rule, tuple(outcomes), facts)

    def complete(self, facts: dict[str, Any]) -> dict[str, Any]:
        """The facts with what this policy makes of them: `run.tainted` from the tools read
        and its `untrusted` globs (unless a test says it)."""
        run = dict(facts["run"])
        if run.get("tainted") is None:
            run["tainted"] = any(
                fnmatch.fnmatchcase(tool, glob) for tool in run["read"] for glob in self.untrusted
            )
        return {**facts, "run": run}


def _outcome(
    rule: Rule, activation: dict[str, Any], as_recorded: bool, bounded: bool
) -> RuleOutcome:
    try:
        holds = rule.condition.holds(activation, as_recorded=as_recorded, bounded=bounded)
    except ConditionFailed as failed:
        return _failed(rule, str(failed), not_a_bool=isinstance(failed, NotABool))
    return RuleOutcome(rule, rule.effect if holds else "none")


def _failed(rule: Rule, why: str, *, not_a_bool: bool = False) -> RuleOutcome:
    """A deny or ask that cannot be evaluated asks: it may have held. An allow does not."""
    return RuleOutcome(rule, "none" if rule.effect == "allow" else "ask", why, not_a_bool)


def _strongest(outcomes: list[RuleOutcome]) -> tuple[Effect, Rule | None]:
    best: RuleOutcome | None = None
    for outcome in outcomes:
        if best is None or STRENGTH[outcome.effect] > STRENGTH[best.effect]:
            best = outcome
    if best is None or best.effect == "none":
        return "none", None
    return best.effect, best.rule
