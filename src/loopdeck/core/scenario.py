"""`scenario.toml`: the goal, the budgets, the default model and the scripted model's scripts."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loopdeck.core.budgets import Budget

Mode = Literal["rounds", "react"]


class ScenarioError(Exception):
    """A scenario or env folder that cannot be used; the message names the file and field."""


class ScriptTurn(BaseModel):
    """One scripted model turn: exactly one of tool, final, ask_user, handoff or raw."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    round: int = Field(default=1, ge=1)
    tool: str | None = None
    args: dict[str, Any] | None = None
    final: str | None = None
    ask_user: str | None = None
    handoff: str | None = None
    raw: str | None = None
    reason_code: str = "SCRIPTED"
    step: int | None = Field(default=None, ge=1)
    repeat: bool = False

    @model_validator(mode="after")
    def _one_action(self) -> ScriptTurn:
        chosen = [
            k
            for k in ("tool", "final", "ask_user", "handoff", "raw")
            if getattr(self, k) is not None
        ]
        if len(chosen) != 1:
            raise ValueError(
                "a turn needs exactly one of tool, final, ask_user, handoff, raw; "
                f"got {chosen or 'none'}"
            )
        if self.args is not None and self.tool is None:
            raise ValueError("args given without tool")
        return self


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    planner: list[str] = Field(default_factory=list)
    executor: list[ScriptTurn] = Field(min_length=1)

    def plan_for(self, round_no: int) -> str:
        if not self.planner:
            return "1. Work toward the goal with the tools you have."
        return self.planner[min(round_no, len(self.planner)) - 1]

    def turns_for(self, round_no: int | None) -> list[ScriptTurn]:
        if round_no is None:
            return list(self.executor)
        return [t for t in self.executor if t.round == round_no]


class ScriptedPrice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_million: float = Field(default=1.0, ge=0)
    output_per_million: float = Field(default=2.0, ge=0)


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    goal: str
    model: str = "scripted"
    mode: Mode = "rounds"
    approval_ttl_s: float = Field(default=300.0, gt=0)
    # With an operator attached: pause and ask when any budget crosses this fraction.
    pause_at: float | None = Field(default=None, gt=0, lt=1)
    # With an operator attached: how long a detected loop waits for their say.
    loop_answer_s: float = Field(default=60.0, gt=0)
    model_timeout_s: float = Field(default=60.0, gt=0)
    temperature: float | None = Field(default=None, ge=0, le=2)
    model_profile: dict[str, Any] = Field(default_factory=dict)
    examples: list[str] = Field(default_factory=list)
    budgets: Budget = Field(default_factory=Budget)
    scripted_price: ScriptedPrice = Field(default_factory=ScriptedPrice)
    data: dict[str, Any] = Field(default_factory=dict)
    scripts: dict[str, Script] = Field(default_factory=dict)


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        lines.append(f"  {where}: {item['msg']}")
    return "\n".join(lines)


def load_scenario(path: Path) -> Scenario:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ScenarioError(f"{path}: file not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from exc
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError(f"{path}: invalid scenario:\n{_describe(exc)}") from exc
