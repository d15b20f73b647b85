"""`g` on a write waiting for approval: approve it and grant, so later calls of the same tool
that the rule covers are approved without asking, in this run only. The chooser: the scope
(exactly these arguments, any arguments, or named fields matching globs), optionally a number
of uses and a time; what the grant would approve said under it as it is typed, or what is
wrong with it. Enter confirms (`Confirmed`); a rule that cannot be read is never sent."""

from __future__ import annotations

import posixpath
import re
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.grant_rules import SCOPES, GrantRule, GrantScope, argument_names
from loopdeck.tui.shown import markup
from loopdeck.tui.shown_input import ShownInput

SCOPE_WORDS = {
    "exact": "exact · exactly these arguments",
    "tool": "tool · any arguments",
    "fields": "fields · each FIELD matching its GLOB (typed below)",
}
SUGGESTED_CAP = 120  # a longer value is not offered as a field's glob
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}


def suggested_fields(args: dict[str, Any]) -> str:
    """`FIELD=GLOB` from the first string argument that makes a sensible one: a path's folder
    (`path=src/*`), else the value itself; "" when none does."""
    for name, value in args.items():
        if not isinstance(value, str) or not value.isprintable() or "," in value:
            continue
        if not value or len(value) > SUGGESTED_CAP or ".." in value.split("/"):
            continue
        folder = posixpath.dirname(value)
        if folder and folder != "/":
            return f"{name}={_literal(folder)}/*"
        return f"{name}={_literal(value)}"
    return ""


def _literal(text: str) -> str:
    """`text` as a glob that matches only itself."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def seconds_of(text: str) -> float | None:
    """`600`, `600s`, `10m`, `1h`; None for an empty box. Raises ValueError."""
    if not text.strip():
        return None
    match = _DURATION.fullmatch(text)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"for {text!r}: a time such as 90, 90s, 10m or 1h")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def uses_of(text: str) -> int | None:
    if not text.strip():
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"uses {text!r}: a whole number of calls, 1 or more")
    return int(text)


class GrantChooser(Vertical):
    """What the grant covers, for how many calls and how long. `rule()` is the grant as it
    stands, or None with what is wrong (also shown under the chooser)."""

    class Confirmed(Message):
        """Enter, in the scope list or a box: the operator means to approve and grant."""

    def __init__(
        self, tool: str, args: dict[str, Any], schema: dict[str, Any], **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.tool = tool
        self.names = sorted(argument_names(schema, args))  # the fields a grant may name
        self.scopes = OptionList(
            *(Option(SCOPE_WORDS[s], id=s) for s in SCOPES), id="grant-scope", compact=True
        )
        self.fields = ShownInput(
            suggested_fields(args), "FIELD=GLOB[,FIELD=GLOB]", id="grant-fields", compact=True
        )
        self.uses = ShownInput(placeholder="any", id="grant-uses", compact=True)
        self.for_s = ShownInput(placeholder="the run", id="grant-for", compact=True)
        self.said = Static(id="grant-said")

    def compose(self) -> ComposeResult:
        yield Static(
            markup("[b]Approve and grant[/]: later $tool calls it covers are not asked",
                   tool=self.tool)
        )  # fmt: skip
        yield self.scopes
        with Horizontal(id="grant-boxes"):
            yield Static("fields ", classes="grant-label")
            yield self.fields
            yield Static(" uses ", classes="grant-label")
            yield self.uses
            yield Static(" for ", classes="grant-label")
            yield self.for_s
        yield self.said

    def on_mount(self) -> None:
        self.scopes.highlighted = 0  # the narrowest: exactly these arguments
        self.show()

    def start(self) -> None:
        self.scopes.focus()
        self.show()

    @property
    def scope(self) -> GrantScope:
        return SCOPES[self.scopes.highlighted or 0]

    def rule(self) -> tuple[GrantRule | None, str]:
        try:
            uses, for_s = uses_of(self.uses.value), seconds_of(self.for_s.value)
            text = self.fields.value if self.scope == "fields" else self.scope
            names = self.names or None  # a tool that says none: any field (as before)
            rule = GrantRule.parse(text, uses=uses, for_s=for_s, tool=self.tool, names=names)
        except ValueError as exc:  # GrantRuleError and pydantic's ValidationError too
            return None, str(exc).splitlines()[0]
        return rule, ""

    def approval(self, call_id: str, by: str) -> ApprovalDecision | None:
        """The approval with this grant; None, with the bell, while the rule cannot be read
        (what is wrong is said under the chooser, never sent)."""
        rule, _ = self.rule()
        if rule is None:
            self.show()
            self.app.bell()
            return None
        return ApprovalDecision(call_id=call_id, approved=True, by=by, grant=rule)

    def show(self) -> None:
        rule, problem = self.rule()
        if rule is None:
            self.said.update(markup("[b $error]not a grant:[/] $problem", problem=problem))
        else:
            self.said.update(
                markup("[b]grants[/] $tool, $words", tool=self.tool, words=rule.words())
            )

    @on(OptionList.OptionHighlighted, "#grant-scope")
    def _scope(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        self.show()

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        if event.input is self.fields and self.fields.has_focus and self.scope != "fields":
            self.scopes.highlighted = SCOPES.index("fields")  # shown again by its message
        self.show()

    @on(OptionList.OptionSelected, "#grant-scope")
    @on(Input.Submitted)
    def _confirmed(self, event: Message) -> None:
        event.stop()
        self.post_message(self.Confirmed())
