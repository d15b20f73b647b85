"""A run's grants as an operator sees them, folded from its events: the rule, who granted
it, how many uses it had and has left, until when, and whether it still approves. The
console's Grants panel and `loopdeck grants` read the same book."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from loopdeck.core.events import ApprovalDecided, EventBase, GrantGiven, GrantRevoked
from loopdeck.core.grant_rules import GrantRule


@dataclass
class GrantRow:
    run_id: str
    grant_id: str
    tool: str
    rule: str  # in words: "path=src/*, 3 uses"
    by: str
    given_at: datetime
    uses: int | None  # the cap, None: unlimited
    expires_at: datetime | None
    used: list[str] = field(default_factory=list)  # the calls it approved
    revoked_by: str | None = None
    run_ended: bool = False

    @property
    def uses_left(self) -> int | None:
        return None if self.uses is None else max(self.uses - len(self.used), 0)

    def state(self, now: datetime | None = None) -> str:
        now = now or datetime.now(UTC)
        if self.revoked_by is not None:
            return f"revoked by {self.revoked_by}"
        if self.uses_left == 0:
            return "used up"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        if self.run_ended:
            return "ended with the run"
        return "active"

    @property
    def active(self) -> bool:
        return self.state() == "active"

    def uses_text(self) -> str:
        left = "∞" if self.uses_left is None else str(self.uses_left)
        return f"{len(self.used)} used, {left} left"


class GrantBook:
    """Grants by id, for one run or many (a store's): `take` each event in order."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], GrantRow] = {}

    def take(self, event: EventBase) -> None:
        if isinstance(event, GrantGiven):
            rule = GrantRule.model_validate(
                {"scope": event.scope, "fields": event.fields, "uses": event.uses}
            )
            until = f", until {event.expires_at.astimezone():%H:%M:%S}" if event.expires_at else ""
            self.rows[(event.run_id, event.grant_id)] = GrantRow(
                run_id=event.run_id,
                grant_id=event.grant_id,
                tool=event.tool,
                rule=rule.words() + until,
                by=event.by,
                given_at=event.at,
                uses=event.uses,
                expires_at=event.expires_at,
            )
        elif isinstance(event, GrantRevoked | ApprovalDecided) and event.grant_id:
            row = self.rows.get((event.run_id, event.grant_id))
            if row is None:
                return
            if isinstance(event, GrantRevoked):
                row.revoked_by = event.by
            else:
                row.used.append(event.call_id)

    def of_run(self, run_id: str) -> list[GrantRow]:
        return [row for (run, _), row in self.rows.items() if run == run_id]

    def ended(self, run_id: str) -> None:
        for row in self.of_run(run_id):
            row.run_ended = True
