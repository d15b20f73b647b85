"""`scenario.toml`: the goal, the budgets, the default model and the scripted model's scripts."""

from __future__ import annotations

import difflib
import pickle
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loopdeck.core.budgets import Budget
from loopdeck.core.scenario_strict import (
    NO_GOAL_CHECK,
    goal_check_problems,
    loose_values,
    meant_key,
    misspelled_table,
)
from loopdeck.core.states import StopReason

Mode = Literal["rounds", "react"]


class ScenarioError(Exception):
    """A scenario or env folder that cannot be used; the message names the file and field."""


class ScriptCall(BaseModel):
    """One of several tool calls the scripted model makes in a single turn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class ScriptTurn(BaseModel):
    """One scripted model turn: exactly one of tool, calls, final, ask_user, handoff or raw."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    round: int = Field(default=1, ge=1)
    tool: str | None = None
    args: dict[str, Any] | None = None
    # Several tool calls in one reply (the model's parallel calls): [{tool = .., args = {..}}]
    calls: list[ScriptCall] | None = Field(default=None, min_length=1)
    final: str | None = None
    ask_user: str | None = None
    handoff: str | None = None
    raw: str | None = None
    reason_code: str = "SCRIPTED"
    step: int | None = Field(default=None, ge=1)
    repeat: bool = False
    # The turn's call is meant to be refused (unknown tool, arguments its tool's model
    # refuses): a test of the corrections path, not a mistake in the script.
    invalid: bool = False

    @model_validator(mode="after")
    def _one_action(self) -> ScriptTurn:
        chosen = [
            k
            for k in ("tool", "calls", "final", "ask_user", "handoff", "raw")
            if getattr(self, k) is not None
        ]
        if len(chosen) != 1:
            raise ValueError(
                "a turn needs exactly one of tool, calls, final, ask_user, handoff, raw; "
                f"got {chosen or 'none'}"
            )
        if self.args is not None and self.tool is None:
            raise ValueError("args given without tool")
        if self.invalid and self.tool is None and self.calls is None:
            raise ValueError("invalid = true marks a turn with tool or calls")
        return self


class Expect(BaseModel):
    """What a script must end with: `loopdeck check` runs it headless and compares."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stop_reason: StopReason
    approve: Literal["auto", "deny"] = "auto"


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    expect: Expect | None = None
    planner: list[str] = Field(default_factory=list)
    executor: list[ScriptTurn] = Field(default_factory=list)
    # An agent's script, played by that agent (loopdeck's scripted ACP agent reads and checks
    # it: `acp_env/config.py`), not by loopdeck's model.
    turns: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _played(self) -> Script:
        if not self.executor and not self.turns:
            raise ValueError("a script needs executor turns (a model) or turns (an ACP agent)")
        return self

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
    # How long a run holds while its store cannot take writes, then stops rather than act
    # unrecorded.
    store_hold_s: float = Field(default=120.0, gt=0)
    model_timeout_s: float = Field(default=60.0, gt=0)
    temperature: float | None = Field(default=None, ge=0, le=2)
    model_profile: dict[str, Any] = Field(default_factory=dict)
    examples: list[str] = Field(default_factory=list)
    budgets: Budget = Field(default_factory=Budget)
    scripted_price: ScriptedPrice = Field(default_factory=ScriptedPrice)
    data: dict[str, Any] = Field(default_factory=dict)
    scripts: dict[str, Script] = Field(default_factory=dict)
    # Python modules the env's code needs (e.g. "pytest"), checked before a run starts.
    requires: list[str] = Field(default_factory=list)
    # The command that checks the goal in the working copy (exit 0: met; each stdout line an
    # unmet reason): any kind's.
    # A kind of run's own table (`[agent]`, …), read and checked by its kind
    # (`operator/kinds.py`): every top-level table the scenario does not know itself.
    tables: dict[str, dict[str, Any]] = Field(default_factory=dict)
    goal_check: list[str] | None = Field(default=None, min_length=1)
    goal_check_timeout_s: float = Field(default=60.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _kind_tables(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        tables = {k: v for k, v in raw.items() if k not in cls.model_fields and isinstance(v, dict)}
        if not tables:
            return raw
        kept = {k: v for k, v in raw.items() if k not in tables}
        return {**kept, "tables": {**raw.get("tables", {}), **tables}}


def described(error: ValidationError, prefix: str = "", read_as: Any = None) -> str:
    """A validation error a line a field: `  agent.acp: Field required` (an unknown key with
    the key meant when `read_as`, the type read, takes one close to it)."""
    return "\n".join(_field_line(item, prefix, read_as) for item in error.errors())


TURNS = ("planner", "executor", "reviewer")  # a script's lists of turns, counted from 1


def _field_line(item: Any, prefix: str, read_as: Any = None) -> str:
    """`  scripts.solve.executor turn 2.args: …`: the field's place (a list's entries counted
    from 1, as a script's turns are said elsewhere) and pydantic's words, an extra key's as
    "unknown key" with the key of its table close to it ("; did you mean max_turns?")."""
    parts: list[str] = []
    for part in (*([prefix] if prefix else []), *item["loc"]):
        if isinstance(part, int) and parts:
            parts[-1] += f" turn {part + 1}" if parts[-1] in TURNS else f" #{part + 1}"
        else:
            parts.append(str(part))
    where = ".".join(parts)
    said = item["msg"]
    if item["type"] == "extra_forbidden":
        meant = meant_key(read_as, tuple(item["loc"])) if read_as is not None else None
        said = f"unknown key; did you mean {meant}?" if meant else "unknown key"
    return f"  {where or '(top level)'}: {said}"


def invalid(
    path: Path,
    what: str,
    error: ValidationError | Sequence[Any],
    settings: Sequence[str],
    prefix: str = "",
    read_as: Any = None,
) -> str:
    """`PATH: invalid scenario:` and a line a field, a field that a `--set` gave blamed on it:
    `--set budgets.max_turns=0 (over PATH): …` when every field is one, else on its line.
    (`error`: pydantic's, or its items: each a dict of `loc`, `type` and `msg`; `read_as`: the
    type read, for the key an unknown one is close to.)"""
    items = error.errors() if isinstance(error, ValidationError) else error
    lines = [_field_line(item, prefix, read_as) for item in items]
    setters = [set_by([*([prefix] if prefix else []), *item["loc"]], settings) for item in items]
    if setters and all(setters):
        given = ", ".join(f"--set {text}" for text in dict.fromkeys(setters))
        return f"{given} (over {path}): {what}:\n" + "\n".join(lines)
    said = [
        line + (f" (from --set {text})" if text else "")
        for line, text in zip(lines, setters, strict=True)
    ]
    return f"{path}: {what}:\n" + "\n".join(said)


def set_by(loc: Sequence[str | int], settings: Sequence[str]) -> str | None:
    """The last `--set KEY=VALUE` whose KEY is the field at `loc` or a table holding it: the
    value there is the one it set. None: the file's own."""
    found = None
    for text in settings:
        parts, _ = parse_setting(text)
        if [str(p) for p in loc[: len(parts)]] == parts:
            found = text
    return found


def parse_setting(text: str) -> tuple[list[str], Any]:
    """`KEY=VALUE` of `--set`: a dotted key, and a TOML value (a bare word is a string)."""
    key, sep, value = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(p.strip() for p in parts):
        raise ScenarioError(f"--set {text!r}: expected KEY=VALUE, e.g. data.orders=3")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    except RecursionError as exc:  # a value of thousands of nested arrays or tables
        raise ScenarioError(f"--set {key.strip()[:100]!r}: the value is nested too deeply") from exc
    return [p.strip() for p in parts], parsed


def apply_settings(raw: dict[str, Any], settings: list[str], path: Path) -> dict[str, Any]:
    """Each `--set` put in `raw`, in order; a key under `data` that the scenario does not
    have is refused by name (`data` is the env's own: nothing else would say a misspelled one
    is never read)."""
    for text in settings:
        parts, value = parse_setting(text)
        table = raw
        for depth, part in enumerate(parts[:-1]):
            if depth and parts[0] == "data":
                _data_has(table, parts[: depth + 1], text, path)
            inner = table.setdefault(part, {})
            if not isinstance(inner, dict):
                raise ScenarioError(f"--set {text!r}: {part!r} is a value, not a table")
            table = inner
        if len(parts) > 1 and parts[0] == "data":
            _data_has(table, parts, text, path)
        table[parts[-1]] = value
    return raw


def _data_has(table: dict[str, Any], parts: list[str], text: str, path: Path) -> None:
    """`--set` changes a value the scenario's `data` has; a key it lacks is refused, with the
    one meant when one is close."""
    if parts[-1] in table:
        return
    meant = difflib.get_close_matches(parts[-1], [str(k) for k in table], n=1, cutoff=0.6)
    hint = f"; did you mean {'.'.join([*parts[:-1], meant[0]])}?" if meant else ""
    raise ScenarioError(
        f"--set {text} (over {path}): [{'.'.join(parts[:-1])}] has no key {parts[-1]!r}{hint}"
        " (--set changes a value the scenario has; a new key goes in scenario.toml)"
    )


# Each scenario text's TOML, parsed once per process and kept pickled (a worker loads its env's
# scenario at every run: tomllib takes ~0.6 ms for a sample env's, a pickled copy ~12 us); each
# load gets a copy of its own, for its settings to change.
_parsed: dict[str, bytes] = {}
PARSED_KEPT = 64


def _parsed_toml(text: str) -> dict[str, Any]:
    kept = _parsed.get(text)
    if kept is not None:
        copy: dict[str, Any] = pickle.loads(kept)
        return copy
    raw = tomllib.loads(text)
    if len(_parsed) >= PARSED_KEPT:
        _parsed.pop(next(iter(_parsed)))
    _parsed[text] = pickle.dumps(raw, pickle.HIGHEST_PROTOCOL)
    return raw


def load_scenario(path: Path, settings: list[str] | None = None) -> Scenario:
    """The scenario of `path`, with `--set KEY=VALUE` overrides applied before validation."""
    try:
        raw = _parsed_toml(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ScenarioError(f"{path}: file not found") from exc
    except OSError as exc:  # unreadable: permissions, a folder, an I/O error
        raise ScenarioError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise ScenarioError(f"{path}: not readable TOML: nested too deeply") from exc
    raw = apply_settings(raw, settings or [], path)
    _strict(path, raw, settings or [])
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        said = invalid(path, "invalid scenario", exc, settings or [], read_as=Scenario)
        raise ScenarioError(said) from exc


def _strict(path: Path, raw: dict[str, Any], settings: list[str]) -> None:
    """What pydantic would read loosely, refused first (`core/scenario_strict.py`): a table
    misspelled, a number or boolean given as something else, a bound of nothing."""
    known = Scenario.model_fields
    if (found := misspelled_table(raw, known)) is not None:
        table, meant = found
        made = [text for text in settings if parse_setting(text)[0][:1] == [table]]
        where = f"--set {made[-1]} (over {path})" if made else str(path)
        raise ScenarioError(f"{where}: unknown table [{table}]; did you mean [{meant}]?")
    items = [{"loc": loc, "type": "strict", "msg": msg} for loc, msg in loose_values(Scenario, raw)]
    items += [{"loc": loc, "type": "strict", "msg": NO_GOAL_CHECK}
              for loc in goal_check_problems(raw, known)]  # fmt: skip
    if items:
        raise ScenarioError(invalid(path, "invalid scenario", items, settings))
