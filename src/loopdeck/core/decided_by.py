"""Who decided a call: a person through a channel, the run's default approver, a standing
grant, a rule of a policy (its file's hash and the rule's id), or loopdeck itself. Every
decision's record carries one (`ApprovalDecided.decided_by`); a request a rule asks the
operator about carries the rule that asked (`ApprovalRequested.asked_by`).

A decision recorded before this existed has only its `by` words: `DecidedBy.of` reads them.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

Who = Literal["operator", "default", "grant", "rule", "loopdeck"]
# The run's fixed approvers (`--approve auto|deny`) and a question nobody answered in time:
# nobody decided, the run's default did.
DEFAULTS = {"auto": "--approve auto", "deny": "--approve deny", "timeout": "no answer in time"}
LOOPDECK = "loopdeck"
RULE_WORDS = re.compile(r"rule (?P<rule>\S+) \((?P<level>\w+) policy (?P<sha>[0-9a-f]+)\)")


class DecidedBy(BaseModel):
    model_config = ConfigDict(frozen=True)

    who: Who
    channel: str = ""  # an operator's way in (console, cli), or the default's name
    operator: str = ""  # the person, when the channel names one (`cli:alice`)
    grant_id: str = ""
    granted_by: str = ""
    rule_id: str = ""
    level: str = ""  # the policy file the rule is in: user, env or run
    policy_sha256: str = ""  # that file's SHA-256
    why: str = ""  # the rule's message

    @classmethod
    def of(cls, by: str) -> DecidedBy:
        """A decision's `by` words read back: `console`, `cli:alice`, `auto`, `loopdeck`,
        `grant g1, granted by console`."""
        if by in DEFAULTS:
            return cls(who="default", channel=DEFAULTS[by])
        if by == LOOPDECK:
            return cls(who="loopdeck")
        if ruled := RULE_WORDS.fullmatch(by):
            return cls(who="rule", rule_id=ruled["rule"], level=ruled["level"],
                       policy_sha256=ruled["sha"])  # fmt: skip
        if by.startswith("grant "):
            grant_id, _, granted_by = by.removeprefix("grant ").partition(", granted by ")
            return cls(who="grant", grant_id=grant_id, granted_by=granted_by)
        channel, sep, person = by.partition(":")
        return cls(who="operator", channel=channel, operator=person if sep else "")

    def words(self) -> str:
        """Who, in a few words, as the transcript, the call panel and the store say it."""
        match self.who:
            case "operator":
                person = f" {self.operator}" if self.operator else ""
                return f"operator{person} via {self.channel or 'an unnamed channel'}"
            case "default":
                return f"the default ({self.channel})"
            case "grant":
                return f"grant {self.grant_id}, granted by {self.granted_by}"
            case "rule":
                return f"rule {self.rule_id} ({self.level} policy {self.policy_sha256[:12]})"
        return LOOPDECK

    def with_why(self) -> str:
        """Who, and a rule's message: `rule no-etc (run policy 1a2b…): nothing outside`."""
        return self.words() + (f": {self.why}" if self.why else "")

    @model_serializer(mode="wrap")
    def _said(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Stored and dumped with the empty fields left out: read back, they are empty."""
        dumped: dict[str, Any] = handler(self)
        return {name: value for name, value in dumped.items() if value != ""}

    def flat(self) -> dict[str, str]:
        """The fields said, for JSON and trace attributes."""
        return {name: str(value) for name, value in self.model_dump().items()}


def refused_words(what: str, by: DecidedBy | None, reason: str) -> str:
    """What an agent is told of a write of its that did not run, by who decided: the
    operator's reason as theirs; anyone else's (a policy rule, `--approve deny`, loopdeck) in
    the decider's own words (`denied by policy rule RULE: WHY`), never as the operator's."""
    if by is None or by.who == "operator":
        return f"the operator rejected {what}; it was not run. Their reason: {reason}"
    return f"{what} was not run: {reason}"
