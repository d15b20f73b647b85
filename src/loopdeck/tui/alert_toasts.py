"""The fleet's alerts as toasts, grouped: runs that say the same thing (a console opened on
a store where ten runs wait, their receipts nearing expiry) are one toast that counts them,
updated in place while it is on screen as more come; never a toast a run, which would bury
the table, the header and the errors said before them (a broken theme).

A toast of a wait (an approval, a question) says only what still waits where the operator is
not looking: none for the run whose screen is open (its dialog, its header say it), and one
shown is taken down, or said again for the runs left, once its wait is decided, answered or
over, or its run is opened (`settle`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from textual.notifications import Notification, Notify, SeverityLevel
from textual.screen import Screen

from loopdeck.core.text import plural, visible
from loopdeck.operator.fleet import FleetRow
from loopdeck.operator.fleet_alerts import Alert
from loopdeck.tui.shown import toast

NAMED = 3  # up to so many runs a toast names; more are counted (the fleet marks each)
KINDS = 3  # the kinds of alert toasted at once; the others are counted in one more toast
# What several runs say, where one run's words do not read for many.
SAID_BY_MANY = {
    " waits for your approval": " wait for your approval (i: the inbox)",
    " asks you a question": " ask you a question (i: the inbox)",
}

# The alerts of a wait, and whether a run still waits so.
WAITS: dict[str, Callable[[FleetRow], bool]] = {
    " waits for your approval": lambda row: row.live and row.approvals > 0,
    " asks you a question": lambda row: row.live and row.questions > 0,
}


@dataclass
class Shown:
    run_ids: list[str]
    notification: Notification


def runs_said(said: str, run_ids: list[str]) -> str:
    """`run X waits for your approval`, `2 runs wait for your approval (i: the inbox): X, Y`,
    `10 runs wait for your approval (i: the inbox)` (the fleet marks each)."""
    if len(run_ids) == 1:
        return f"run {run_ids[0]}{said}"
    named = f": {', '.join(run_ids)}" if len(run_ids) <= NAMED else ""
    return f"{plural(len(run_ids), 'run')}{SAID_BY_MANY.get(said, said)}{named}"


class AlertToasts:
    """The toasts of one fleet: one a kind of alert (its words after the run's id, its
    severity), naming and counting its runs."""

    def __init__(self) -> None:
        self._shown: dict[tuple[str, str], Shown] = {}

    def show(
        self, screen: Screen[None], alerts: Sequence[Alert], looked_at: str | None = None
    ) -> None:
        """`alerts` toasted, but a wait of the run `looked_at` (its screen open)."""
        kinds: dict[tuple[str, str], list[str]] = {}
        for alert in alerts:
            said = alert.text.removeprefix(f"run {alert.run_id}")
            if said in WAITS and alert.run_id == looked_at:
                continue
            if said == alert.text:  # not worded by its run: said as it is
                toast(screen, said, title="loopdeck", severity=cast(SeverityLevel, alert.severity))
                continue
            run_ids = kinds.setdefault((alert.severity, said), [])
            if alert.run_id not in run_ids:
                run_ids.append(alert.run_id)
        shown = sorted(kinds.items(), key=lambda kind: kind[0][0] != "error")  # errors first
        for (severity, said), run_ids in shown[:KINDS]:
            self._toast(screen, severity, said, run_ids)
        if rest := sum(len(run_ids) for _, run_ids in shown[KINDS:]):
            toast(screen, f"{plural(rest, 'more alert')}: the fleet marks their runs",
                  title="loopdeck", severity="warning")  # fmt: skip

    def _toast(self, screen: Screen[None], severity: str, said: str, run_ids: list[str]) -> None:
        before = self._shown.get((severity, said))
        if before is not None and not before.notification.has_expired:
            # Replaced by the toast that counts them all: an expired one leaves the rack.
            before.notification.timeout = 0
            run_ids = before.run_ids + [r for r in run_ids if r not in before.run_ids]
        notification = Notification(
            visible(runs_said(said, run_ids)),
            "loopdeck",
            cast(SeverityLevel, severity),
            screen.app.NOTIFICATION_TIMEOUT,
            markup=False,
        )
        self._shown[(severity, said)] = Shown(run_ids, notification)
        screen.app.post_message(Notify(notification))

    def settle(
        self, screen: Screen[None], rows: Mapping[str, FleetRow], looked_at: str | None
    ) -> None:
        """A wait's toast naming runs that no longer wait so, or the run `looked_at`: taken
        down, and said again for the runs that still wait, if any."""
        for (severity, said), shown in list(self._shown.items()):
            waits = WAITS.get(said)
            if waits is None or shown.notification.has_expired:
                continue
            left = [r for r in shown.run_ids if r != looked_at and r in rows and waits(rows[r])]
            if left == shown.run_ids:
                continue
            # Textual takes a toast down only privately (a click on it does this).
            screen.app._unnotify(shown.notification)
            del self._shown[(severity, said)]
            if left:
                self._toast(screen, severity, said, left)
