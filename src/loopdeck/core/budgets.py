"""Budgets: finite caps on everything a run can spend, and the ledger that spends them.

Each cap's facts live once, on its `Cap` member: the Budget field of its limit, the ledger
field of its use, its label and unit for people, its CLI flag, whether it is burnt or
counted, and the stop it makes. What a cap has used is one type, `CapUsage`, whose `used`
is None when some of it was never reported (a model reply with no usage, an agent that
sends none): unknown is that one value everywhere, never 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from loopdeck.caps import FLAGGED_CAPS, Cap
from loopdeck.core.states import StopReason
from loopdeck.core.text import number

__all__ = ["FLAGGED_CAPS", "Budget", "BudgetExhausted", "BudgetLedger", "Cap", "CapUsage"]

# Kept for the readers that look a cap's stop reason up by table; the fact is `Cap.stops_as`.
CAP_STOP_REASON: dict[Cap, StopReason] = {cap: StopReason(cap.stops_as) for cap in Cap}


# The caps' names as plain strings: the budget event validates them as its keys faster
# than the members (a str subclass), and `usage` is built twice a step.
_TURNS, _TOOL_CALLS, _TOKENS, _COST, _DEADLINE, _ROUNDS, _CORRECTIONS = (cap.value for cap in Cap)


def figure(cap: Cap, amount: float) -> str:
    """An amount of a cap for a person: seconds whole, dollars to four places."""
    if cap is Cap.DEADLINE:
        return str(int(amount))
    if cap is Cap.COST:
        return f"{amount:.4f}"
    return number(amount)


@dataclass(frozen=True, slots=True)
class CapUsage:
    """What a cap has used of its limit. `used` is None when some of it was never reported:
    unknown, never 0. `reported` is what was said: all of `used` when it is known, a lower
    bound of it when not (the ledger checks the cap against it)."""

    used: float | None
    limit: float
    reported: float

    @property
    def known(self) -> bool:
        return self.used is not None

    @property
    def fraction(self) -> float:
        """The reported share of the limit: the whole share when known, a floor when not."""
        return self.reported / self.limit if self.limit else 0.0

    def amount(self, cap: Cap) -> str:
        """`120/700`, or `unknown` (what was reported of it is in `spent`)."""
        if self.used is None:
            return "unknown"
        return f"{figure(cap, self.used)}/{number(self.limit)}"

    def spent(self, cap: Cap) -> str:
        """The use alone, for a summary: `1,200`, `unknown`, `unknown (≥1,200 reported)`."""
        if self.used is not None:
            return figure(cap, self.used)
        if self.reported:
            return f"unknown (≥{figure(cap, self.reported)} reported)"
        return "unknown"


def cap_usages(
    pairs: dict[str, tuple[float, float]], unreported: dict[str, int]
) -> dict[Cap, CapUsage]:
    """The typed reading of a budget event's (reported, limit) pairs and the caps some of
    whose use was never reported; a stored name no cap has is left out."""
    caps: dict[Cap, CapUsage] = {}
    for name, (reported, limit) in pairs.items():
        cap = Cap.named(name)
        if cap is not None:
            used = None if unreported.get(cap, 0) else float(reported)
            caps[cap] = CapUsage(used, float(limit), float(reported))
    return caps


class Budget(BaseModel):
    """The caps of one run. Every cap is finite."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    max_turns: int = Field(default=40, gt=0)
    max_tool_calls: int = Field(default=60, gt=0)
    max_tokens: int = Field(default=200_000, gt=0)
    max_cost_usd: float = Field(default=1.0, gt=0)
    deadline_s: float = Field(default=300.0, gt=0)
    max_rounds: int = Field(default=4, gt=0)
    max_corrections: int = Field(default=2, ge=0)

    def limit(self, cap: Cap) -> float:
        value: float = getattr(self, cap.limit_field)
        return value


class BudgetExhausted(Exception):
    def __init__(self, cap: Cap, used: float, limit: float) -> None:
        # Counts whole with separators (`2,621,570 of 60,000`), never `2.62157e+06`.
        super().__init__(f"{cap.value} budget exhausted: {number(used)} of {number(limit)}")
        self.cap = cap
        self.used = used
        self.limit = limit

    @property
    def stop_reason(self) -> StopReason:
        return CAP_STOP_REASON[self.cap]


class BudgetLedger:
    """What has been spent against a Budget.

    A call that does not say what it spent of a cap (a model reply with no usage, an
    unpriced model's cost, an agent's turn cut short) is counted in `unreported`: from then
    on the cap's use is unknown (`CapUsage.used` is None), and what was reported is a lower
    bound of it. The cap is checked against that bound: it still stops a run known to be
    past it, and cannot stop one past it by what went unreported; the panel and the summary
    say so (`≥N`, `unknown`), never a silent 0.

    The deadline counts the agent's own time: while the clock is held (the run is paused, or
    a write waits for the operator) the time goes to `operator_s` instead.
    """

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.started = time.monotonic()
        self.held: str | None = None
        self._held_since: float | None = None
        self._operator_s = 0.0
        # A wait taken over from the log (`carry_hold`): when it began, when it was taken up.
        self._carried: tuple[datetime, datetime] | None = None
        self.turns = 0
        self.tool_calls = 0
        self.tokens = 0
        self.cost_usd = 0.0
        # Calls that never said what they spent of a cap, by cap (tokens, cost).
        self.unreported: dict[str, int] = {}
        # An agent's context window as it last said it: (tokens in it, its size). Its fill,
        # not tokens spent: shown apart, never charged.
        self.window: tuple[int, int] | None = None
        self.rounds = 0
        self.corrections = 0

    def start_clock(self) -> None:
        self.started = time.monotonic()

    def hold(self, why: str) -> None:
        """Stop charging the agent: the operator is being waited on."""
        if self._held_since is None:
            self._held_since = time.monotonic()
            self.held = why

    def release(self) -> None:
        if self._held_since is not None:
            self._operator_s += time.monotonic() - self._held_since
            self._held_since, self.held = None, None
        self._carried = None

    def carry_hold(self, began: datetime) -> None:
        """The run, rebuilt from its log, was waiting on its operator since `began` when its
        log ends (it was parked, or its worker lost): the wait up to now is the operator's,
        until the decision says when it came (`decided`); the agent's time is as it was."""
        now = datetime.now(UTC)
        self._give_operator(max((now - began).total_seconds(), 0.0))
        self._carried = (began, now)

    def decided(self, at: datetime | None) -> None:
        """What the run waited on came at `at` (the store's time of the decision; None: as
        it is taken). A carried wait counted past it, while no worker ran the run, is
        nobody's: the operator had decided, and the agent was not running."""
        carried, self._carried = self._carried, None
        if carried is None or at is None:
            return
        began, taken_up = carried
        self._give_operator(-max((taken_up - max(at, began)).total_seconds(), 0.0))

    def _give_operator(self, seconds: float) -> None:
        """`seconds` more of the operator's time, the agent's own left as it is."""
        self._operator_s += seconds
        self.started -= seconds

    def operator_s(self) -> float:
        """Time spent waiting on the operator so far."""
        holding = time.monotonic() - self._held_since if self._held_since is not None else 0.0
        return self._operator_s + holding

    def elapsed(self) -> float:
        """The agent's own time since the clock started."""
        return time.monotonic() - self.started - self.operator_s()

    def remaining_time(self) -> float:
        return self.budget.deadline_s - self.elapsed()

    def used(self, cap: Cap) -> float:
        """What was reported of the cap's use (a lower bound when some went unreported)."""
        if cap is Cap.DEADLINE:
            return self.elapsed()
        value: float = getattr(self, cap.used_field)
        return value

    def not_reported(self, cap: Cap) -> None:
        """A call did not say what it spent of `cap`: its use is unknown from now on."""
        self.unreported[cap] = self.unreported.get(cap, 0) + 1

    def unreported_calls(self, cap: Cap) -> int:
        return self.unreported.get(cap, 0)

    def usage(self) -> dict[str, tuple[float, float]]:
        """Each cap's (reported use, limit) by the cap's name, as the budget event carries
        it; spelled out in `Cap`'s order, as it is built twice a step (a test checks it
        against `used` and `limit` for every cap). `caps` is its typed reading."""
        budget = self.budget
        return {
            _TURNS: (self.turns, budget.max_turns),
            _TOOL_CALLS: (self.tool_calls, budget.max_tool_calls),
            _TOKENS: (self.tokens, budget.max_tokens),
            _COST: (self.cost_usd, budget.max_cost_usd),
            _DEADLINE: (self.elapsed(), budget.deadline_s),
            _ROUNDS: (self.rounds, budget.max_rounds),
            _CORRECTIONS: (self.corrections, budget.max_corrections),
        }

    def caps(self) -> dict[Cap, CapUsage]:
        """Each cap's use, None where some of it went unreported."""
        return cap_usages(self.usage(), self.unreported)

    def _ensure_below(self, cap: Cap) -> None:
        used, limit = self.used(cap), self.budget.limit(cap)
        if used >= limit:
            raise BudgetExhausted(cap, used, limit)

    def _ensure_within(self, cap: Cap) -> None:
        used, limit = self.used(cap), self.budget.limit(cap)
        if used > limit:
            raise BudgetExhausted(cap, used, limit)

    def check_deadline(self) -> None:
        self._ensure_below(Cap.DEADLINE)

    def before_model_call(self) -> None:
        """Raise if one more model call would break a cap."""
        self.check_deadline()
        self._ensure_below(Cap.TURNS)
        self._ensure_below(Cap.TOKENS)
        self._ensure_below(Cap.COST)

    def record_model_call(self, tokens: int | None, cost_usd: float | None) -> None:
        """A model call spent: its tokens and cost, each None when the reply did not say."""
        self.turns += 1
        if tokens is None:
            self.not_reported(Cap.TOKENS)
        else:
            self.tokens += tokens
        if cost_usd is None:
            self.not_reported(Cap.COST)
        else:
            self.cost_usd += cost_usd

    def after_model_call(self) -> None:
        """Raise if what the last call spent went over a cap."""
        self._ensure_within(Cap.TOKENS)
        self._ensure_within(Cap.COST)
        self.check_deadline()

    def before_tool_call(self) -> None:
        self.check_deadline()
        self._ensure_below(Cap.TOOL_CALLS)

    def record_tool_call(self) -> None:
        self.tool_calls += 1

    def withdraw_tool_call(self) -> None:
        """A call counted as it was released never reached its agent: it did not run."""
        self.tool_calls = max(0, self.tool_calls - 1)

    def crossed(self, fraction: float, asked: set[Cap]) -> tuple[Cap, float, float] | None:
        """The first burnt cap at or past `fraction` of its limit not asked about yet."""
        for cap in Cap:
            if cap in asked or not cap.burnt:  # rounds and corrections are counted
                continue
            used, limit = self.used(cap), self.budget.limit(cap)
            if limit and used / limit >= fraction:
                return cap, used, limit
        return None

    def raise_cap(self, cap: Cap, limit: float) -> None:
        if cap is Cap.CORRECTIONS:
            raise KeyError(cap)  # corrections are counted, never raised by the operator
        field = cap.limit_field
        value = int(limit) if cap.whole else limit
        self.budget = Budget.model_validate({**self.budget.model_dump(), field: value})

    def start_round(self) -> None:
        self._ensure_below(Cap.ROUNDS)
        self.rounds += 1

    def record_correction(self) -> None:
        self.corrections += 1
        self._ensure_within(Cap.CORRECTIONS)
