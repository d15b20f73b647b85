"""A pushed link for a write whose outcome is unknown still takes the operator's word once
its run has ended, as `loopdeck resolve` does (the store resolves an ended run's outcomes):
the page offers "it took effect / it did not", never "withdrawn"."""

from __future__ import annotations

import html
import time

from test_decision_refusals import Recorded, record
from test_notify_links import Desk, _form, _session, desk  # noqa: F401

from loopdeck.core.decision_events import ApprovalDecided
from loopdeck.core.events import CallStatus, RunStopped, ToolFinished
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator import records
from loopdeck.operator.link_tokens import OUTCOME_ASK
from loopdeck.store.opening import open_store


async def _ended_with_an_unknown_outcome(served: Desk) -> None:
    run = Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1")
    run.add(ApprovalDecided, call_id="c1", approved=True, reason="", by="cli:op")
    run.add(ToolFinished, call_id="c1", tool="write_file", status=CallStatus.OUTCOME_UNKNOWN,
            result={"error": "timed out"}, duration_ms=1.0)  # fmt: skip
    run.add(RunStopped, state=RunState.STOPPED, stop_reason=StopReason.GOAL_MET, detail="done")
    store = await open_store(served.db)
    try:
        await record(store, run)
    finally:
        await store.close()


async def test_an_outcome_link_takes_its_word_after_the_run_ended(
    desk: Desk,  # noqa: F811 (the fixture)
) -> None:
    await _ended_with_an_unknown_outcome(desk)
    async with records.opened(desk.db) as store:
        assert [o.call_id for o in await records.unknown_outcomes(store, "r1")] == ["c1"]
    claim = desk.server.claim("r1", "c1", OUTCOME_ASK, "outcome", int(time.time()) + 600)
    async with _session() as browser:
        page = await (await browser.get(desk.server.link(claim))).text()
        assert "withdrawn" not in page and "It took effect" in page, html.unescape(page)
        action, guard = _form(page)
        posted = {"csrf": guard, "action": "applied"}
        said = html.unescape(await (await browser.post(desk.base + action, data=posted)).text())
    assert '<p class="done">' in said, said
    async with records.opened(desk.db) as store:
        assert await records.unknown_outcomes(store, "r1") == []
