"""What is worth interrupting the operator for in a fleet, each said once (`Alerts`): a run
starts waiting for you, a receipt has under 30 s left, the guard blocks a repeat, a budget
passes 80 %, a run stops, a run moves to another worker ("run X resumed on host-b after
host-a's lease expired 3s ago"). A console looks only at the runs its fleet says changed and
at those waiting (`Alerts.check`'s `only`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from loopdeck.operator.fleet import Fleet, FleetRow

RESUMED = "resumed on"  # a move to another worker, as `store/leases.py` words it


@dataclass(frozen=True)
class Alert:
    run_id: str
    text: str
    severity: str = "warning"


@dataclass
class Alerts:
    """What is worth interrupting the operator for, each said once: a run starts waiting for
    you, a receipt has under 30 s left, the guard blocks a repeat, a budget passes 80 %, a
    run stops."""

    said: set[tuple[str, str]] = field(default_factory=set)
    seen: dict[str, tuple[int, int, int, bool, bool, str]] = field(default_factory=dict)

    def check(self, fleet: Fleet, now: datetime, only: Iterable[str] | None = None) -> list[Alert]:
        """Every run looked at, or `only` those (the runs touched since the last look and
        those waiting, whose receipts may near their expiry: what a console passes)."""
        alerts = []
        rows = fleet.rows
        for run_id in rows if only is None else only:
            row = rows.get(run_id)
            if row is None:
                continue
            before = self.seen.get(row.run_id)
            high = row.closest_fraction >= 0.8
            moved = f"{row.moved_at}" if row.move.startswith(RESUMED) else ""
            self.seen[row.run_id] = (
                row.approvals, row.questions, row.repeats, row.live, high, moved
            )  # fmt: skip
            if before is None:
                if row.live:
                    alerts.extend(_asks(row, row.approvals, row.questions))
                continue
            approvals, questions, repeats, live, was_high, was_moved = before
            if moved and moved != was_moved:  # each move once, from the first look on
                alerts.append(Alert(row.run_id, f"run {row.run_id} {row.move}", "information"))
            alerts.extend(_asks(row, row.approvals - approvals, row.questions - questions))
            if row.repeats > repeats:
                alerts.append(Alert(row.run_id, f"run {row.run_id}: the guard blocked a repeat"))
            if high and not was_high and row.live:
                alerts.append(Alert(row.run_id, f"run {row.run_id}: {row.closest} of its cap"))
            if live and not row.live:
                severity = "information" if row.stop_reason == "goal_met" else "error"
                alerts.append(
                    Alert(row.run_id, f"run {row.run_id} stopped: {row.stop_reason}", severity)
                )
            expiry = row.soonest_expiry
            if row.approvals and expiry is not None and 0 < (expiry - now).total_seconds() < 30:
                key = (row.run_id, f"expiry {expiry.isoformat()}")
                if key not in self.said:
                    self.said.add(key)
                    alerts.append(
                        Alert(row.run_id, f"run {row.run_id}: a receipt expires in under 30 s")
                    )
        return alerts


def _asks(row: FleetRow, more_approvals: int, more_questions: int) -> list[Alert]:
    """A run that started waiting for an approval, or for an answer."""
    alerts = []
    if more_approvals > 0:
        alerts.append(Alert(row.run_id, f"run {row.run_id} waits for your approval"))
    if more_questions > 0:
        alerts.append(Alert(row.run_id, f"run {row.run_id} asks you a question"))
    return alerts
