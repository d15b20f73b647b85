"""What the console's screens share, typed and in one place: `SharedState`, held by the app
(`ConsoleState.shared`) and given to each screen as it is made (`console_start`). A screen
reads and records these here; what it asks of the app is a message (`console_messages`).

Light on purpose, like `loopdeck.tui.app`: nothing of the run's own modules at import.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loopdeck.core.outcome import RunOutcome
    from loopdeck.core.runtime import Runtime


@dataclass(frozen=True)
class OwnDrive:
    """A run this console drives: its runtime, and the console's task that waits on it (the
    run itself is on the runs' thread, `operator/run_loop.py`; cancelling the task cancels
    the run and waits until it has recorded its stop)."""

    runtime: Runtime
    task: asyncio.Task[RunOutcome | None]


@dataclass
class SharedState:
    """The console's facts that more than one screen reads or records."""

    # The console was opened on a store, not on one run: escape on a run goes back to it.
    fleet_home: bool = False
    # Runs the operator has looked at (opened from the fleet, or watched to their stop): the
    # fleet marks no other stop as unseen (●).
    seen_runs: set[str] = field(default_factory=set)
    # What waits for the operator in each run of the store (the fleet's rows, or
    # `waiting_elsewhere.count_waiting`): a run's header says "+N in other runs" from it.
    waiting_by_run: dict[str, int] = field(default_factory=dict)
    # This console's own runs, each driven in a task Textual's workers do not own
    # (`RunScreen.drive`), by run id: a console that fails waits for each to record its stop
    # (`console_failure`).
    own_drives: dict[str, OwnDrive] = field(default_factory=dict)
    # The run the operator looks at: the topmost run screen's (None: none is open). Set by
    # the app, which knows its stack; the fleet toasts none of its waits.
    looked_at: Callable[[], str | None] = lambda: None
