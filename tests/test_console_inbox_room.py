"""The inbox gives its list the room its entries need (up to half the screen) and the
selected entry the rest: at 160x48, six entries are all in view, not two with the detail
below mostly empty; a plan step longer than its column ends in "…"."""

from __future__ import annotations

from pathlib import Path

from console_helpers import screen_lines, wait_until
from test_decision_refusals import SCHEMA, Recorded, record

from loopdeck.core.approvals import request_for
from loopdeck.core.decision_events import ApprovalRequested
from loopdeck.core.states import RunState
from loopdeck.store.opening import open_store
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.inbox import InboxScreen

STEP = "3. Tell the customer where the order goes now, and when it is expected to arrive there"


def _waiting(run_id: str) -> Recorded:
    run = Recorded(run_id).started(RunState.AWAITING_APPROVAL)
    request = request_for(
        run_id=run_id, call_id="c1", tool="write_file", args={"path": "a.txt"},
        state_hash="s1", fingerprint="f1", plan_step=STEP, ttl_s=300, args_schema=SCHEMA,
    )  # fmt: skip
    return run.add(ApprovalRequested, grant_id=None, **request.model_dump(exclude={"run_id"}))


async def test_the_inbox_list_shows_every_entry_it_has_room_for(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await record(store, *(_waiting(f"run{n:02d}") for n in range(6)))
    finally:
        await store.close()
    app = LoopdeckApp(ConsoleStart.for_fleet(db))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen))
        inbox = app.screen
        await wait_until(pilot, lambda: len(inbox.entries) == 6)
        await pilot.pause()
        lines = screen_lines(app)
        for n in range(6):
            assert any(f"run{n:02d}  decisions/files" in line for line in lines), n
        table = inbox.query_one("#inbox-table")
        assert table.max_scroll_y == 0
        detail = inbox.query_one("#inbox-detail")
        assert detail.region.y <= table.region.y + 6 + 4  # right under the list
        rows = [line for line in lines if "c1    write_file" in line]  # the list's rows
        assert len(rows) == 6
        assert all(line.rstrip(" │").endswith("…") for line in rows), rows
        assert STEP[:40] in rows[0]
