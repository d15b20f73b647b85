"""A worker's pushes of its runs' decisions (`loopdeck worker --notify`): each run it holds
pushes as a run of its own process does (`operator/notifications.py`), with two differences.

A run waiting on its operator is parked once it has waited `LOOPDECK_PARK_AFTER_S`, and a
parked run has no process to push anything: so it stays on its worker until its due pushes
have gone (or were given up on), then it is parked. And a run a worker takes up from its log
was pushed by the workers before it: its notifier reads the log as the run goes live (the
asks, the decisions, the pushes already made), so a decision pushed before the move is not
pushed again, and one still owed is pushed from here. A push on its way as its run leaves
(handed back as its worker stops) is waited for, as long as a push may take, and recorded
before the lease goes: else it went out unrecorded and the next worker pushed it again.
"""

from __future__ import annotations

import logging
from typing import Any

from loopdeck.core.events import Event
from loopdeck.core.replay_log import ReplayLog
from loopdeck.operator.parking import Parking


def pushing(notifier: Any, parking: Parking, replay: ReplayLog | None, forked: bool) -> None:
    """The run's notifier (None: its worker pushes nothing) holds its parking while it owes
    a push; a run rebuilt from its own log (a fork's pushes are its own) has it read there."""
    if notifier is None:
        return
    parking.holds.append(notifier.owes)
    if replay is not None and not forked:  # before the first live event, which may decide
        replay.on_live.insert(0, lambda: caught_up(notifier, replay.events))


async def recorded(notifier: Any) -> None:
    """Before the run leaves its worker: the pushes on their way recorded, within the time
    one push may take (`Channels.bound_s`) and a second more. One that is not by then is
    said: it may reach the operator twice."""
    if notifier is None:
        return
    if not await notifier.recorded(notifier.channels.bound_s + 1.0):
        logging.getLogger("loopdeck.notify").warning(
            "loopdeck notify: run %s left its worker with a push on its way, not recorded",
            notifier.run.run_id,
        )


def caught_up(notifier: Any, log: list[Event]) -> None:
    """The run's log told to its notifier. One it cannot take is said, and the run goes
    live all the same: its pushes from here on are what it lacks (never its move)."""
    try:
        notifier.read_log(log)
    except Exception:
        logging.getLogger("loopdeck.notify").exception("loopdeck notify: the log not read")
