"""A run's standing grants: given with an approval (`GrantGiven`), each later call a grant
covers approved without asking (`ApprovalDecided` with its `grant_id`, "by grant g1, granted
by …"), revoked by the operator (`GrantRevoked`). They live in the runtime only: a grant
never outlives its run.

A grant approves; it never lets more through than an approval would: the duplicate check
comes before it, the receipt still binds the call to the state it was asked in, and a call
asked again (the state changed between the decision and the dispatch) asks the operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from loopdeck.core.events import Emit, GrantGiven, GrantRevoked
from loopdeck.core.grant_rules import GrantRule


@dataclass
class Grant:
    grant_id: str
    tool: str
    rule: GrantRule
    args: dict[str, Any]  # the arguments it was given with (what `exact` holds to)
    by: str
    expires_at: datetime | None
    uses_left: int | None
    revoked_by: str | None = None

    def covers(self, tool: str, args: dict[str, Any], now: datetime) -> bool:
        return (
            self.state(now) == "active"
            and tool == self.tool
            and self.rule.covers_args(self.args, args)
        )

    def state(self, now: datetime) -> str:
        """active, revoked, used up or expired."""
        if self.revoked_by is not None:
            return "revoked"
        if self.uses_left is not None and self.uses_left <= 0:
            return "used up"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"

    def approver(self) -> str:
        """Who approved a call under this grant, as its approval records it."""
        return f"grant {self.grant_id}, granted by {self.by}"


class Grants:
    def __init__(self, emit: Emit, run_id: str) -> None:
        self._emit = emit
        self._run_id = run_id
        self.given: list[Grant] = []

    def give(
        self, call_id: str, tool: str, rule: GrantRule, args: dict[str, Any], by: str
    ) -> Grant:
        now = datetime.now(UTC)
        grant = Grant(
            grant_id=f"g{len(self.given) + 1}",
            tool=tool,
            rule=rule,
            args=args,
            by=by,
            expires_at=None if rule.for_s is None else now + timedelta(seconds=rule.for_s),
            uses_left=rule.uses,
        )
        self.given.append(grant)
        self._emit(
            GrantGiven,
            run_id=self._run_id,
            grant_id=grant.grant_id,
            call_id=call_id,
            tool=tool,
            scope=rule.scope,
            fields=dict(rule.fields),
            args=args if rule.scope == "exact" else {},
            uses=rule.uses,
            expires_at=grant.expires_at,
            by=by,
        )
        return grant

    def covering(self, tool: str, args: dict[str, Any]) -> Grant | None:
        """The first active grant that covers this call, its use counted."""
        grant = self.find(tool, args)
        if grant is not None:
            self.use(grant)
        return grant

    def find(self, tool: str, args: dict[str, Any]) -> Grant | None:
        """The first active grant that covers this call, its use not counted (a policy's
        rule that asks or denies comes before it)."""
        now = datetime.now(UTC)
        return next((grant for grant in self.given if grant.covers(tool, args, now)), None)

    @staticmethod
    def use(grant: Grant) -> None:
        if grant.uses_left is not None:
            grant.uses_left -= 1

    def revoke(self, grant_id: str, by: str) -> str | None:
        """None when revoked now; else why not (no such grant, already revoked)."""
        grant = next((g for g in self.given if g.grant_id == grant_id), None)
        if grant is None:
            return f"no grant {grant_id} in this run"
        if grant.revoked_by is not None:
            return f"grant {grant_id} was already revoked by {grant.revoked_by}"
        grant.revoked_by = by
        self._emit(GrantRevoked, run_id=self._run_id, grant_id=grant_id, by=by)
        return None
