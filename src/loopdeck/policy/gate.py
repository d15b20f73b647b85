"""A run's policy as its runtime asks it (`core/policy_gate.PolicyGate`): the policy in force,
its rules' memory of this run (`RuleBook`: uses, the states they last allowed in, the run's
start their age counts from), and the kind of run its calls come from.

A rule's age (`rule.age_s`) counts from the run's start as its log records it (`RunStarted`):
live, rebuilt from its log on another worker, or replayed (`policy/replay.py`), one clock. A
fork goes on under its source's policy as the source left it: its rules' ages count from the
source's start, as their uses carry over (`PolicyInForce.rules_since` keeps it in the fork's
own log, for its rebuild and its replay; `RunForked.rules_since` before its first ask).
While a run is rebuilt, each ask is evaluated at the time its log recorded and with the ages
it recorded, so that the rebuilt run decides as the run did."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any

from loopdeck.core.events import Event, PolicyDecided, PolicyInForce, RunStarted
from loopdeck.core.grants import Grant
from loopdeck.core.policy_gate import PolicyVerdict
from loopdeck.core.replay_events import RunForked
from loopdeck.policy.engine import Policy, Rule, RuleBook, RuleMemory
from loopdeck.policy.expressions import PAST_STEPS


class RunPolicy:
    def __init__(self, policy: Policy, run_kind: str) -> None:
        self.policy = policy
        self.run_kind = run_kind
        self.book = RuleBook()
        # Rebuilt from its log: its recorded conditions evaluated as the run evaluated them.
        self.as_recorded = False
        self._logged: dict[str, list[PolicyDecided]] = {}  # each call's verdicts, in order

    def seen(self, event: Event) -> None:
        """The run's bus: its start, as recorded, is when its rules came into force."""
        if isinstance(event, RunStarted):
            self.book.start(event.at)

    def rebuilding(
        self, log: Sequence[Event] = (), own: Sequence[Event] = ()
    ) -> Callable[[], None]:
        """Its run is rebuilt from `log` (its own, or a fork's source's; `own`: the run's own
        log, empty on a fork's first claim; its rules' age counts from its own record of
        it, else from `rules_since(log)`: a fork's source's until it went live): until
        it goes live (the callable returned), each ask is evaluated at the time and with the
        ages the log recorded, and a recorded condition today's load refuses as the run
        evaluated it, so the rebuild decides as the run did. Past that the run decides calls
        nobody decided before: such a condition fails, closed, and ages count on from the
        recorded start."""
        self.as_recorded = True
        # A fork's own log says its rules' start once it went live; before, its source's does.
        since = _recorded_since(own) or rules_since(log)
        if since is not None:
            self.book.start(since)
        for event in log:
            if isinstance(event, PolicyDecided):
                self._logged.setdefault(event.call_id, []).append(event)

        def live() -> None:
            self.as_recorded = False
            self._logged.clear()

        return live

    def in_force(self) -> dict[str, Any]:
        return {
            "sha256": self.policy.sha256,
            "levels": [level.recorded() for level in self.policy.levels],
            "run_kind": self.run_kind,
            "rules_since": self.book.since,
        }

    def decide(self, facts: dict[str, Any], grant: Grant | None) -> PolicyVerdict:
        """The verdict on one ask, each rule that decided counted as the run takes it (its
        `count`: never where a decision of the operator's stood over it). A grant that covers
        the call decides only where no rule does (`core/policy_gate.py`): it is no rule's use."""
        memory: RuleMemory = self.book
        logged = self._logged.get(str(facts["call"]["id"]))
        # Bound by the steps where no record says the run evaluated it whole: every rule
        # of an ask nobody decided before, only those its record says failed past it else.
        bounded = {rule.key for rule in self.policy.rules}
        if self.as_recorded and logged:
            decided = logged.pop(0)
            recorded = decided.facts
            if "time" in recorded:
                facts = {**facts, "time": recorded["time"]}
            memory = _AsLogged(self.book, recorded.get("rules", {}))
            bounded = {e.split(": ", 1)[0] for e in decided.errors if PAST_STEPS in e}
        evaluation = self.policy.evaluate(
            facts, memory, as_recorded=self.as_recorded, bounded=bounded
        )
        return replace(evaluation.verdict(), count=partial(self.book.decided, evaluation))


def rules_since(log: Sequence[Event]) -> datetime | None:
    """When the rules of the run whose log this is came into force: as its policy or its
    going live as a fork recorded it (a fork's: its source's start), else its start; None
    with neither."""
    return _recorded_since(log) or next((e.at for e in log if isinstance(e, RunStarted)), None)


def _recorded_since(log: Sequence[Event]) -> datetime | None:
    """Its rules' start as its `PolicyInForce` or its `RunForked` recorded it (a fork parked
    before its first ask has no `PolicyInForce`); None where neither says."""
    for event in log:
        if isinstance(event, PolicyInForce | RunForked) and event.rules_since is not None:
            return event.rules_since
    return None


@dataclass(frozen=True)
class _AsLogged:
    """A rebuilt ask's rules' memory: uses and states as the rebuild counts them, each rule's
    age as the log recorded it (the run's clock then, not the rebuild's now)."""

    book: RuleBook
    rules: dict[str, dict[str, Any]]

    def uses(self, rule: Rule) -> int:
        return self.book.uses(rule)

    def age_s(self, rule: Rule, at: datetime) -> float:
        recorded = self.rules.get(rule.key, {}).get("age_s")
        return self.book.age_s(rule, at) if recorded is None else float(recorded)

    def last_state(self, rule: Rule) -> str:
        return self.book.last_state(rule)
