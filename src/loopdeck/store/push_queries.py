"""What was pushed of the decisions waiting in a run (`decisions_pushed` events, recorded by
the run's own process): read for the inbox, which marks each entry pushed."""

from __future__ import annotations

from loopdeck.core.events import kind_of
from loopdeck.core.push_events import DecisionsPushed
from loopdeck.store.base import Store


async def pushes(store: Store, run_id: str) -> dict[str, DecisionsPushed]:
    """The last push of each decision of the run, by its call or question id."""
    rows = await store.fetchall(
        "SELECT body FROM events WHERE run_id = ? AND kind = ? ORDER BY seq",
        (run_id, kind_of(DecisionsPushed)),
    )
    found: dict[str, DecisionsPushed] = {}
    for row in rows:
        push = DecisionsPushed.model_validate_json(row["body"])
        found.update((decision.call_id, push) for decision in push.decisions)
    return found
