"""A call's decision as the Call panel says it (`RunView.decided`): approved or rejected, by
whom and when, why, the operator's edit, where its push went; then the word on an outcome
that was unknown."""

from __future__ import annotations

from loopdeck.core.events import ApprovalDecided, OutcomeResolved
from loopdeck.operator.transcript import clock_text

# How it says an approval ran the call with the operator's arguments.
EDITED = ", edited: "


def decided_words(e: ApprovalDecided, pushed: str | None) -> str:
    """The decision in words: "approved by ana at 10:02:03, edited: path → b.txt (ntfy)"."""
    verb, when = "approved" if e.approved else "rejected", clock_text(e.at)
    reason = f": {e.reason}" if not e.approved and e.reason else ""
    edited = f"{EDITED}{'; '.join(e.changes)}" if e.changes else ""
    push = f" ({pushed})" if pushed else ""
    return f"{verb} by {e.by} at {when}{reason}{edited}{push}"


def resolved_words(before: str, e: OutcomeResolved) -> str:
    """The decision's words, and the operator's word on its outcome after them."""
    said = "applied" if e.applied else "not applied"
    return f"{before}; {said} by {e.by} at {clock_text(e.at)}"
