"""A run's policy as its runtime asks it (`core/policy_gate.PolicyGate`): the policy in force,
its rules' memory of this run (`RuleBook`: uses, the states they last allowed in), and the
kind of run its calls come from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from loopdeck.core.grants import Grant
from loopdeck.core.policy_gate import PolicyVerdict
from loopdeck.policy.engine import Policy, RuleBook


class RunPolicy:
    def __init__(self, policy: Policy, run_kind: str, since: datetime | None = None) -> None:
        self.policy = policy
        self.run_kind = run_kind
        self.book = RuleBook(since or datetime.now(UTC))
        # Rebuilt from its log: its recorded conditions evaluated as the run evaluated them.
        self.as_recorded = False

    def rebuilding(self) -> Callable[[], None]:
        """Its run is rebuilt from a log (its own, or a fork's source's): until it goes live
        (the callable returned), a recorded condition today's load refuses is evaluated as
        the run evaluated it, so the rebuild decides as the run did. Past that the run
        decides calls nobody decided before: such a condition fails, closed."""
        self.as_recorded = True

        def live() -> None:
            self.as_recorded = False

        return live

    def in_force(self) -> dict[str, Any]:
        return {
            "sha256": self.policy.sha256,
            "levels": [level.recorded() for level in self.policy.levels],
            "run_kind": self.run_kind,
        }

    def decide(self, facts: dict[str, Any], grant: Grant | None) -> PolicyVerdict:
        """The verdict on one ask, each rule that decided counted as the run takes it (its
        `count`: never where a decision of the operator's stood over it). A grant that covers
        the call decides only where no rule does (`core/policy_gate.py`): it is no rule's use."""
        evaluation = self.policy.evaluate(facts, self.book, as_recorded=self.as_recorded)
        return replace(evaluation.verdict(), count=partial(self.book.decided, evaluation))
