"""What was pushed of the decisions waiting in a store (`decisions_pushed` events, recorded
by each run's own process): read for the inbox, which marks each entry pushed."""

from __future__ import annotations

from collections.abc import Iterable

from loopdeck.core.events import kind_of
from loopdeck.core.push_events import DecisionsPushed
from loopdeck.store.base import Store


async def pushes(store: Store, run_ids: Iterable[str]) -> dict[tuple[str, str], DecisionsPushed]:
    """The last push of each decision of these runs, by (run, call or question id)."""
    found: dict[tuple[str, str], DecisionsPushed] = {}
    for run_id in sorted(set(run_ids)):
        rows = await store.fetchall(
            "SELECT body FROM events WHERE run_id = ? AND kind = ? ORDER BY seq",
            (run_id, kind_of(DecisionsPushed)),
        )
        for row in rows:
            push = DecisionsPushed.model_validate_json(row["body"])
            for decision in push.decisions:
                found[(run_id, decision.call_id)] = push
    return found
