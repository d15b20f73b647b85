"""A policy file's inline tests (`[[test]]`): each a call in a state, with what the file's own
rules must decide of it. A file with a failing test refuses to load, naming the test; `loopdeck
policy test` runs them alone.

A test's facts are made as a run makes them (the same keys, the same `run.tainted` from the
tools read and `untrusted`), with every rule's own attributes the test's `rule` table. A test
on whose call a rule's condition gives no bool fails, naming the rule, whatever the file
decides: in a run that rule fails at every such ask.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime

from loopdeck.core.budgets import Cap
from loopdeck.policy.document import PolicyCase
from loopdeck.policy.engine import Evaluation, Level, Policy, Rule, RuleOutcome

CAPS = tuple(cap.value for cap in Cap)


@dataclass(frozen=True)
class CaseMemory:
    """Every rule's own attributes as one test sets them."""

    case: PolicyCase

    def uses(self, rule: Rule) -> int:
        return self.case.rule.uses

    def age_s(self, rule: Rule, at: datetime) -> float:
        return self.case.rule.age_s

    def last_state(self, rule: Rule) -> str:
        return self.case.rule.last_state


@dataclass(frozen=True)
class CaseResult:
    level: Level
    index: int
    case: PolicyCase
    evaluation: Evaluation

    @property
    def name(self) -> str:
        named = f" ({self.case.name})" if self.case.name else ""
        return f"test {self.index}{named}"

    @property
    def got(self) -> str:
        """What happens: allow, deny or ask (a rule asks, or none decides)."""
        return "ask" if self.evaluation.effect == "none" else self.evaluation.effect

    @property
    def by(self) -> str:
        rule = self.evaluation.rule
        return rule.id if rule else ""

    @property
    def no_bool(self) -> RuleOutcome | None:
        """The first rule whose condition gave no bool on the test's call: a broken rule,
        whatever the file decides (a deny that fails asks, as a test may expect)."""
        return next((o for o in self.evaluation.outcomes if o.not_a_bool), None)

    @property
    def passed(self) -> bool:
        expected_rule = self.case.expect_rule
        decided = self.got == self.case.expect and expected_rule in (None, self.by)
        return decided and self.no_bool is None

    def words(self) -> str:
        """`test 2 (etc): expected deny, got allow by rule reads`; a rule whose condition gave
        no bool named first (`test 1: rule y's condition gives IntType 1, not a bool`)."""
        if (broken := self.no_bool) is not None:
            return (
                f"{self.name}: rule {broken.rule.id}'s condition {broken.error}: a condition"
                " must give true or false"
            )
        got = f"{self.got} by rule {self.by}" if self.by else f"{self.got} (no rule decides)"
        decider, outcomes = self.evaluation.rule, self.evaluation.outcomes
        failed = next((o.error for o in outcomes if o.rule is decider and o.error), "")
        if failed:  # it asks because its condition failed: the error is what to fix
            got += f" (its condition could not be evaluated: {failed})"
        elif not self.passed and (other := next((o for o in outcomes if o.error), None)):
            got += f" (rule {other.rule.id}'s condition could not be evaluated: {other.error})"
        if self.passed:
            return f"{self.name}: {got}"
        expected: str = self.case.expect
        if self.case.expect_rule:
            expected += f" by rule {self.case.expect_rule}"
        elif self.case.expect_rule == "":
            expected += " (no rule decides)"
        return f"{self.name}: expected {expected}, got {got}"


def case_facts(case: PolicyCase) -> dict[str, object]:
    call, state, run = case.call, case.state, case.run
    budget = {cap: run.budget.get(cap, 0.0) for cap in (*CAPS, *run.budget)}
    return {
        "call": {
            "id": "c1",
            "tool": call.tool,
            "title": call.title or call.tool,
            "args": call.args,
            "risk": call.risk,
            "risk_source": call.risk_source,
            "kind": call.kind,
        },
        "state": {
            "hash": state.hash,
            "proposed": state.hash if state.unchanged else f"{state.hash} before",
            "unchanged": state.unchanged,
        },
        "run": {
            "id": "test",
            "env": run.env,
            "round": run.round,
            "budget": budget,
            "repeats": run.repeats,
            "read": list(run.read),
            "tainted": run.tainted,
        },
        "time": (case.time or datetime.now(UTC)).isoformat(),
    }


def run_cases(level: Level) -> list[CaseResult]:
    """Every test of the file, against the file's own rules (as enforced, whatever its mode:
    a shadow file's tests say what it would decide)."""
    alone = Policy([_enforced(level)])
    return [
        CaseResult(level, index, case, alone.evaluate(case_facts(case), CaseMemory(case)))
        for index, case in enumerate(level.cases, 1)
    ]


def _enforced(level: Level) -> Level:
    rules = tuple(replace(rule, shadow=False) for rule in level.rules)
    return replace(level, mode="enforce", rules=rules)
