"""The inbox gives its list the room its entries need (up to half the screen) and the
selected entry the rest: at 160x48, six entries are all in view, not two with the detail
below mostly empty. At 80 columns the list never scrolls sideways: the expiry, the run, the
call, the tool and what it is all fit, what it is cut with "…" (in full below)."""

from __future__ import annotations

import re
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


def _waiting(run_id: str, call_id: str = "c1", tool: str = "write_file") -> Recorded:
    run = Recorded(run_id).started(RunState.AWAITING_APPROVAL)
    request = request_for(
        run_id=run_id, call_id=call_id, tool=tool, args={"path": "a.txt"},
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
        assert all(STEP in line for line in rows), rows  # room for the whole step here


async def test_at_80_columns_every_column_an_operator_decides_by_fits(tmp_path: Path) -> None:
    """A provider's long call id and a long tool name: the run, the call, the tool, the
    expiry and the step all in view at 80 columns (the step went past the edge, the list
    scrolled sideways); the env/script left to the entry below, which names it."""
    db = tmp_path / "s.db"
    store = await open_store(db)
    try:
        await record(
            store,
            _waiting("run00", "call_8f2KQp1xZr7TnV0aYbW3cD4e", "update_delivery_address"),
            _waiting("run01"),
        )
    finally:
        await store.close()
    app = LoopdeckApp(ConsoleStart.for_fleet(db))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, InboxScreen))
        inbox = app.screen
        await wait_until(pilot, lambda: len(inbox.entries) == 2)
        await pilot.pause()
        table = inbox.query_one("#inbox-table")
        assert table.max_scroll_x == 0  # nothing past the right edge
        lines = screen_lines(app)
        header = next(line for line in lines if "expires" in line)
        assert header.split()[1:-1] == ["expires", "run", "call", "tool", "what"], header
        for run_id, call, tool in (
            ("run00", "call_8f2KQp", "update_deliv"),
            ("run01", "c1", "write_file"),
        ):
            row = next(line for line in lines if f"  {run_id}  " in line)
            assert call in row and tool in row, row
            assert re.search(r"│  \d:\d\d ", row), row  # its expiry, first
            assert STEP[:12] in row and row.rstrip(" │").endswith("…"), row
        detail = "\n".join(lines)
        assert "decisions/files" in detail  # the env/script, in the entry below
