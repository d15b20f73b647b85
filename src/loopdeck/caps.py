"""The caps a run's budget puts on it, each with its facts said once.

A root module with no imports of loopdeck's own: the CLI's parser reads the flags from it
without loading pydantic or the runtime (`tests/test_core_isolation.py`). The Budget, the
ledger and `CapUsage` (what a cap has used: None when unknown) are in `core/budgets.py`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class Cap(StrEnum):
    """A cap, by the name stored in every budget event, with its facts."""

    # The Budget field of its limit, and the ledger field of its use ("" for the
    # deadline: the agent's elapsed time, read from the clock).
    limit_field: str
    used_field: str
    # For people: its name ("tool calls") and the unit its amounts are in ("$", "s"); a
    # cap with no unit is a count, whole.
    label: str
    unit: str
    # The `run`/`acp`/`submit` flag that sets its limit ("" when no flag does), and what the
    # flag takes, as `--help` says it ("N", "USD", "SECONDS").
    flag: str
    metavar: str
    # Burnt (spent as the agent works: turns, tokens, money, time) or counted (steps of
    # the run: rounds, corrections). Only burnt caps pause the run or rank the fleet.
    burnt: bool
    # The stop it makes when exhausted: a `StopReason`'s value ("turn_limit").
    stops_as: str

    def __new__(
        cls, value: str, limit_field: str, used_field: str, label: str, unit: str, flag: str,
        metavar: str, burnt: bool, stops_as: str,
    ) -> Cap:  # fmt: skip
        cap = str.__new__(cls, value)
        cap._value_ = value
        cap.limit_field, cap.used_field = limit_field, used_field
        cap.label, cap.unit, cap.flag, cap.metavar = label, unit, flag, metavar
        cap.burnt, cap.stops_as = burnt, stops_as
        return cap

    TURNS = ("turns", "max_turns", "turns", "turns", "", "--max-turns", "N", True,
             "turn_limit")  # fmt: skip
    TOOL_CALLS = ("tool_calls", "max_tool_calls", "tool_calls", "tool calls", "",
                  "--max-tool-calls", "N", True, "tool_call_limit")  # fmt: skip
    TOKENS = ("tokens", "max_tokens", "tokens", "tokens", "", "--max-tokens", "N", True,
              "token_limit")  # fmt: skip
    COST = ("cost_usd", "max_cost_usd", "cost_usd", "cost", "$", "--max-cost", "USD", True,
            "cost_limit")  # fmt: skip
    DEADLINE = ("deadline_s", "deadline_s", "", "time", "s", "--deadline", "SECONDS", True,
                "deadline")  # fmt: skip
    ROUNDS = ("rounds", "max_rounds", "rounds", "rounds", "", "--max-rounds", "N", False,
              "round_limit")  # fmt: skip
    CORRECTIONS = ("corrections", "max_corrections", "corrections", "fixes", "", "", "", False,
                   "invalid_decision")  # fmt: skip

    @property
    def option(self) -> str:
        """The flag's argparse name, as `RunOptions.budget_overrides` keys it ("max_cost");
        "" when no flag sets the cap."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def whole(self) -> bool:
        """Counted in whole numbers (its limit an int): every cap with no unit."""
        return not self.unit

    @property
    def short_label(self) -> str:
        """The label with its unit, for a narrow column: "cost $", "time s"."""
        return f"{self.label} {self.unit}" if self.unit else self.label

    @staticmethod
    def named(name: str) -> Cap | None:
        """The cap a stored name means; None for a name no cap has (a newer writer's)."""
        return _NAMED.get(name)


_NAMED = {cap.value: cap for cap in Cap}
FLAGGED_CAPS = tuple(cap for cap in Cap if cap.flag)


def budget_overrides(args: Any) -> dict[str, Any]:
    """The budget flags' values in parsed arguments (None: not given), by the name
    `RunOptions.budget_overrides` takes them: `run`, `acp`, `gateway` and `submit` share them."""
    return {cap.option: getattr(args, cap.option) for cap in FLAGGED_CAPS}
