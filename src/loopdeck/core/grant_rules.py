"""What a standing grant covers: a rule the operator gives with an approval (`g` in the
console, `loopdeck approve … --grant`), read the same from every front end.

The scopes: `exact` (this tool with exactly the approved arguments), `tool` (this tool, any
arguments), `fields` (this tool, when each named field matches its glob: `path=src/*`).
A glob is `fnmatch`'s, case-sensitive, and its `*` crosses `/`; a value with a `..` path
segment never matches, so `path=src/*` does not cover `src/../etc/passwd`. Optionally for
`uses` calls or `for_s` seconds, whichever ends first; never past the run.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Collection
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

GrantScope = Literal["exact", "tool", "fields"]
SCOPES: tuple[GrantScope, ...] = ("exact", "tool", "fields")


class GrantRuleError(ValueError):
    """A grant as written cannot be read; the message says which part."""


class GrantRule(BaseModel):
    model_config = ConfigDict(frozen=True)

    scope: GrantScope
    fields: dict[str, str] = {}  # FIELD -> GLOB, for the `fields` scope
    uses: int | None = Field(default=None, ge=1)
    for_s: float | None = Field(default=None, gt=0)

    @classmethod
    def parse(
        cls,
        text: str,
        uses: int | None = None,
        for_s: float | None = None,
        *,
        tool: str = "",
        names: Collection[str] | None = None,
    ) -> GrantRule:
        """`exact`, `tool`, or `FIELD=GLOB[,FIELD=GLOB…]` (the CLI's `--grant`). `names`: the
        fields `tool` takes (`argument_names`), when known; a field outside them is refused,
        as a grant naming it could never cover a call."""
        text = text.strip()
        if text in ("exact", "tool"):
            return cls(scope=text, uses=uses, for_s=for_s)
        fields: dict[str, str] = {}
        for part in text.split(","):
            name, sep, glob = part.partition("=")
            if not sep or not name.strip() or not glob:
                raise GrantRuleError(
                    f"grant {text!r}: expected exact, tool or FIELD=GLOB (e.g. path=src/*)"
                )
            fields[name.strip()] = glob
        if names is not None and (unknown := [n for n in fields if n not in names]):
            takes = ", ".join(sorted(names)) or "no arguments"
            raise GrantRuleError(
                f"grant {text!r}: {unknown[0]} is not an argument of {tool or 'the tool'}"
                f" (it takes {takes})"
            )
        return cls(scope="fields", fields=fields, uses=uses, for_s=for_s)

    def covers_args(self, approved: dict[str, Any], args: dict[str, Any]) -> bool:
        """Whether `args` fall under this rule; `approved` are the arguments it was given
        with (what `exact` holds to)."""
        if self.scope == "tool":
            return True
        if self.scope == "exact":
            return _same(approved, args)
        return all(
            name in args and _matches(args[name], glob) for name, glob in self.fields.items()
        )

    def words(self) -> str:
        """The rule as the operator reads it: `path=src/*, 3 uses, 600s`."""
        said = {
            "exact": "exactly these arguments",
            "tool": "any arguments",
            "fields": ", ".join(f"{k}={v}" for k, v in self.fields.items()),
        }[self.scope]
        if self.uses is not None:
            said += f", {self.uses} use{'s' if self.uses != 1 else ''}"
        if self.for_s is not None:
            said += f", {self.for_s:g}s"
        return said


def argument_names(schema: dict[str, Any], args: dict[str, Any]) -> set[str]:
    """The fields a grant for a call can name: its tool's schema's properties and the call's
    own arguments."""
    properties = schema.get("properties")
    return set(args) | (set(properties) if isinstance(properties, dict) else set())


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _matches(value: Any, glob: str) -> bool:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if ".." in text.replace("\\", "/").split("/"):
        return False
    return fnmatch.fnmatchcase(text, glob)
