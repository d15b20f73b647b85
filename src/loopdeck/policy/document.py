"""A policy file as written: `policy.toml`, TOML.

```toml
mode = "enforce"             # or "shadow": record what it would decide, decide nothing
untrusted = ["fetch*"]       # tools whose output taints the run (`run.tainted`)
[[rule]]
id = "src-writes"
effect = "allow"             # allow | ask | deny
when = 'call.tool == "write_file" && call.args.path.startsWith("src/") && state.unchanged'
message = "..."              # told to the model on deny, to the operator on ask
[[test]]
call = { tool = "write_file", args = { path = "/etc/passwd" } }
expect = "deny"              # allow | ask | deny; expect_rule = "id" ("": no rule)
```

Anything else is refused by name: a misspelt key is a rule that never fires. Values are taken
as written (`unchanged = "no"` is refused, not read as true), and a test's `expect_rule` must
name one of the file's rules.
"""

from __future__ import annotations

import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

RuleEffect = Literal["allow", "ask", "deny"]
Mode = Literal["enforce", "shadow"]
RULE_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_BYTES = 256 * 1024  # a policy is a page of rules, not a data file


class PolicyError(ValueError):
    """A policy that cannot be used: its words name the file, and the rule or test."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class RuleText(Strict):
    id: str = Field(pattern=RULE_ID)
    effect: RuleEffect
    when: str = Field(min_length=1)
    message: str = ""


class CaseCall(Strict):
    tool: str
    args: dict[str, Any] = {}
    risk: Literal["read", "write"] = "write"
    risk_source: str = ""
    kind: str = "python"
    title: str = ""  # how the call is shown (default: its tool)


class CaseState(Strict):
    hash: str = "s1"
    unchanged: bool = True


class CaseRun(Strict):
    env: str = "test"
    round: int = 1
    budget: dict[str, float] = {}  # each cap's used fraction (absent: 0)
    repeats: int = 0
    read: list[str] = []  # the tools whose output the model has read
    tainted: bool | None = None  # None: from `read` and the policy's `untrusted`


class CaseRule(Strict):
    uses: int = Field(default=0, ge=0)
    age_s: float = Field(default=0.0, ge=0)
    last_state: str = ""  # the state it last allowed in ("": never)


class PolicyCase(Strict):
    name: str = ""
    call: CaseCall
    state: CaseState = CaseState()
    run: CaseRun = CaseRun()
    rule: CaseRule = CaseRule()  # every rule's own attributes in this test
    time: datetime | None = None  # default: now
    expect: RuleEffect
    expect_rule: str | None = None  # the rule that decides ("": none does)


class PolicyDocument(Strict):
    mode: Mode = "enforce"
    untrusted: list[str] = []
    rule: list[RuleText] = []
    test: list[PolicyCase] = []

    @model_validator(mode="after")
    def _ids_once(self) -> PolicyDocument:
        seen: set[str] = set()
        for rule in self.rule:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id!r} is used twice")
            seen.add(rule.id)
        for index, case in enumerate(self.test, 1):
            if case.expect_rule and case.expect_rule not in seen:
                named = f" ({case.name})" if case.name else ""
                ids = ", ".join(sorted(seen)) or "none"
                raise ValueError(
                    f"test {index}{named}: expect_rule {case.expect_rule!r} names no rule of"
                    f" this file (its rules: {ids})"
                )
        return self


def read_document(path: Path) -> tuple[PolicyDocument, str]:
    """The file's document and its text; `PolicyError` naming the file and the field."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise PolicyError(f"{path}: {len(raw):,} bytes; a policy file is at most {MAX_BYTES:,}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{path}: not UTF-8 text: {exc}") from None
    return parse_document(path, text), text


def parse_document(path: Path, text: str, *, tests: bool = True) -> PolicyDocument:
    """The document `text` holds; without its `[[test]]` tables unless `tests` (a policy a
    run recorded: its tests were passed when it was, and are not run again)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{path}: not TOML: {exc}") from None
    if not tests:
        data.pop("test", None)
    try:
        return PolicyDocument.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(f"{path}: {described(exc, data)}") from None


def described(exc: ValidationError, data: dict[str, Any]) -> str:
    """The first problem, placed: `rule 2 (src-writes): effect: ...`."""
    error = exc.errors()[0]
    where = list(error["loc"])
    said = []
    if len(where) >= 2 and where[0] in ("rule", "test") and isinstance(where[1], int):
        table, index = where[0], where[1]
        entry = data.get(table, [])[index] if index < len(data.get(table, [])) else {}
        name = entry.get("id" if table == "rule" else "name") if isinstance(entry, dict) else None
        said.append(f"{table} {index + 1}" + (f" ({name})" if name else ""))
        where = where[2:]
    if where:
        said.append(".".join(str(part) for part in where))
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    return ": ".join([*said, message])
