"""Budgets: finite caps on everything a run can spend, and the ledger that spends them."""

from __future__ import annotations

import time
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from loopdeck.core.states import StopReason
from loopdeck.core.text import number


class Cap(StrEnum):
    TURNS = "turns"
    TOOL_CALLS = "tool_calls"
    TOKENS = "tokens"
    COST = "cost_usd"
    DEADLINE = "deadline_s"
    ROUNDS = "rounds"
    CORRECTIONS = "corrections"


CAP_STOP_REASON: dict[Cap, StopReason] = {
    Cap.TURNS: StopReason.TURN_LIMIT,
    Cap.TOOL_CALLS: StopReason.TOOL_CALL_LIMIT,
    Cap.TOKENS: StopReason.TOKEN_LIMIT,
    Cap.COST: StopReason.COST_LIMIT,
    Cap.DEADLINE: StopReason.DEADLINE,
    Cap.ROUNDS: StopReason.ROUND_LIMIT,
    Cap.CORRECTIONS: StopReason.INVALID_DECISION,
}


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
        value: float = getattr(self, LIMIT_FIELD[cap])
        return value


# Each cap's limit on the Budget, and what the ledger counts it in (the deadline is the
# agent's elapsed time): looked up per cap, several times a step, without building a table.
LIMIT_FIELD: dict[Cap, str] = {
    Cap.TURNS: "max_turns",
    Cap.TOOL_CALLS: "max_tool_calls",
    Cap.TOKENS: "max_tokens",
    Cap.COST: "max_cost_usd",
    Cap.DEADLINE: "deadline_s",
    Cap.ROUNDS: "max_rounds",
    Cap.CORRECTIONS: "max_corrections",
}
USED_FIELD: dict[Cap, str] = {
    Cap.TURNS: "turns",
    Cap.TOOL_CALLS: "tool_calls",
    Cap.TOKENS: "tokens",
    Cap.COST: "cost_usd",
    Cap.ROUNDS: "rounds",
    Cap.CORRECTIONS: "corrections",
}


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
    """What has been spent against a Budget. Costs of unknown price are counted apart.

    The deadline counts the agent's own time: while the clock is held (the run is paused, or
    a write waits for the operator) the time goes to `operator_s` instead.
    """

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.started = time.monotonic()
        self.held: str | None = None
        self._held_since: float | None = None
        self._operator_s = 0.0
        self.turns = 0
        self.tool_calls = 0
        self.tokens = 0
        self.cost_usd = 0.0
        self.cost_unknown_calls = 0
        self.tokens_unknown = False  # no figure was ever reported (an ACP agent's)
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
        if cap is Cap.DEADLINE:
            return self.elapsed()
        value: float = getattr(self, USED_FIELD[cap])
        return value

    def usage(self) -> dict[str, tuple[float, float]]:
        """Each cap's (used, limit), by the cap's name; spelled out, as it is built twice a step
        (a test checks it against `used` and `limit` for every cap)."""
        budget = self.budget
        return {
            "turns": (self.turns, budget.max_turns),
            "tool_calls": (self.tool_calls, budget.max_tool_calls),
            "tokens": (self.tokens, budget.max_tokens),
            "cost_usd": (self.cost_usd, budget.max_cost_usd),
            "deadline_s": (self.elapsed(), budget.deadline_s),
            "rounds": (self.rounds, budget.max_rounds),
            "corrections": (self.corrections, budget.max_corrections),
        }

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

    def record_model_call(self, tokens: int, cost_usd: float | None) -> None:
        self.turns += 1
        self.tokens += tokens
        if cost_usd is None:
            self.cost_unknown_calls += 1
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

    def crossed(self, fraction: float, asked: set[Cap]) -> tuple[Cap, float, float] | None:
        """The first cap at or past `fraction` of its limit not asked about yet."""
        for cap in Cap:
            if cap in asked or cap in (Cap.ROUNDS, Cap.CORRECTIONS):  # counted, not burnt
                continue
            used, limit = self.used(cap), self.budget.limit(cap)
            if limit and used / limit >= fraction:
                return cap, used, limit
        return None

    def raise_cap(self, cap: Cap, limit: float) -> None:
        if cap is Cap.CORRECTIONS:
            raise KeyError(cap)  # corrections are counted, never raised by the operator
        field = LIMIT_FIELD[cap]
        value = int(limit) if field.startswith("max_") and field != "max_cost_usd" else limit
        self.budget = Budget.model_validate({**self.budget.model_dump(), field: value})

    def start_round(self) -> None:
        self._ensure_below(Cap.ROUNDS)
        self.rounds += 1

    def record_correction(self) -> None:
        self.corrections += 1
        self._ensure_within(Cap.CORRECTIONS)
