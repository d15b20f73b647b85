"""What was pushed of the decisions waiting in a run (`decisions_pushed` and `push_failed`
events, recorded by the run's own process): read for the inbox, which marks each entry pushed
or its push failed."""

from __future__ import annotations

from loopdeck.core.events import kind_of
from loopdeck.core.push_events import DecisionsPushed, Push, PushFailed
from loopdeck.store.base import Store


async def pushes(store: Store, run_id: str) -> dict[str, Push]:
    """The last push of each decision of the run (that went or failed), by its call or
    question id."""
    pushed, failed = kind_of(DecisionsPushed), kind_of(PushFailed)
    rows = await store.fetchall(
        "SELECT kind, body FROM events WHERE run_id = ? AND kind IN (?, ?) ORDER BY seq",
        (run_id, pushed, failed),
    )
    found: dict[str, Push] = {}
    for row in rows:
        cls = DecisionsPushed if row["kind"] == pushed else PushFailed
        push: Push = cls.model_validate_json(row["body"])
        found.update((decision.call_id, push) for decision in push.decisions)
    return found
