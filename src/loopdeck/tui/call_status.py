"""A call's status as the console words it, the same in the Calls table and the Call panel:
a proposed call is running (a read goes from proposed to finished with no event between), with
the latest progress its tool reported while it runs."""

from __future__ import annotations

from loopdeck.core.events import CallStatus
from loopdeck.core.outcome import CallRecord
from loopdeck.operator.decided_words import EDITED

# Each status's words and the theme color they are drawn in.
STATUS_LOOK: dict[CallStatus, tuple[str, str]] = {
    CallStatus.PROPOSED: ("running", "primary"),
    CallStatus.RUNNING: ("running", "primary"),
    CallStatus.PENDING_APPROVAL: ("⚠ pending approval", "warning"),
    CallStatus.EXECUTED: ("executed", "success"),
    CallStatus.FAILED: ("failed", "error"),
    CallStatus.BLOCKED_REPEAT: ("⟳ blocked as repeat", "repeat-mark"),
    CallStatus.REJECTED: ("rejected", "error"),
    CallStatus.REFUSED_DUPLICATE: ("refused duplicate", "warning"),
    CallStatus.WITHDRAWN: ("withdrawn", "foreground-muted"),
    CallStatus.INTERRUPTED: ("interrupted", "error"),
    CallStatus.SKIPPED: ("skipped", "foreground-muted"),
    CallStatus.SKIPPED_AFTER_TRIP: ("skipped after repeat", "foreground-muted"),
    CallStatus.OUTCOME_UNKNOWN: ("? outcome unknown", "error"),
}

GUARD_HELD_LOOK = ("⟳ held: guard asks", "warning")
GUARD_HELD_WORDS = "held by the guard: it asks you"
RUNNING = frozenset({CallStatus.PROPOSED, CallStatus.RUNNING})


def status_label(row: CallRecord) -> str:
    """The Calls table's status: "running 30% copying" while it reports progress."""
    label = STATUS_LOOK[row.status][0]
    if row.progress is not None and row.status in RUNNING:
        return f"{label} {row.progress.short()}"
    return label


def status_words(row: CallRecord, guard_held: bool) -> str:
    """The Call panel's status: "running · 3/10 (30%): copying" while it reports progress."""
    if guard_held:
        return GUARD_HELD_WORDS
    label = STATUS_LOOK[row.status][0]
    if row.progress is not None and row.status in RUNNING:
        return f"{label} · {row.progress.words()}"
    return label


def tool_as_run(tool: str, decided: str) -> str:
    """The tool as the Call panel's title names it. A call approved with edited arguments is
    said so, and a name that carries the call's input (an ACP terminal's `terminal: COMMAND`)
    keeps only its kind: what it names never ran, the arguments below did."""
    if EDITED not in decided:
        return tool
    return f"{tool.split(': ', 1)[0]} · edited: it ran with the arguments below"
