"""A run moved to another worker asks its pending write again (`leases.refresh_request`
rewrites the row's requested_at): the console's run screen decides the asking the row has
now, as the CLI and the inbox do. It named the asking of the event it had followed, and the
store refused every decision from it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any


async def test_the_run_screen_decides_a_moved_runs_pending_write(db: Any) -> None:
    from test_decision_refusals import Recorded

    from loopdeck.core.approvals import ApprovalDecision
    from loopdeck.core.states import RunState
    from loopdeck.operator.store_link import StoreLink
    from loopdeck.store import leases, queries
    from loopdeck.store.opening import open_store
    from loopdeck.store.writer import EventWriter

    store = await open_store(db)
    try:
        run = Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1")
        writer = EventWriter(store, approve_mode="wait")
        for e in run.events:
            writer(e)
        await writer.flush()
        link = StoreLink(db, "r1")
        link.store = store
        for e in run.events:
            link._note(e)
        again = datetime.now(UTC) + timedelta(seconds=5)  # the rebuilt run's own asking
        expires = again + timedelta(seconds=300)
        await leases.refresh_request(store, "r1", "c1", again.isoformat(), expires.isoformat())
        await link._refresh_pending()
        assert [p.requested_at for p in link.pending()] == [again]
        yes = ApprovalDecision(call_id="c1", approved=True, by="console")
        assert await link.decide(yes)
        row = await queries.approval_state(store, "r1", "c1")
        assert row is not None and row["state"] == "approved"
    finally:
        await store.close()
