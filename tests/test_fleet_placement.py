"""The fleet shows where each submitted run is and each move (issue 42): a queued run listed
before any worker starts it, the host holding it, parked, and a resume on another host said
once; fed by the leases' change number, so a refresh reads the leases that changed, never all
of them. Both engines; a store from before v7 brought forward with its leases listed."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import fresh_pg_database
from test_fleet_feed import refreshed_until

from loopdeck.core.events import RunStarted
from loopdeck.operator.fleet import Fleet
from loopdeck.operator.fleet_alerts import Alerts
from loopdeck.store import feed, leases
from loopdeck.store.base import SCHEMA_VERSION, Location
from loopdeck.store.opening import open_store
from loopdeck.store.writer import EventWriter

A = leases.WorkerName("host-a", 101, "aaaa")
B = leases.WorkerName("host-b", 202, "bbbb")
SUBMITTED = {"env": "/somewhere/shared_orders", "script": "solve", "model": "scripted"}


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Any, monkeypatch: Any) -> Location:
    if request.param == "sqlite":
        return tmp_path / "s.db"
    return fresh_pg_database(monkeypatch)


async def test_the_fleet_shows_where_each_run_is_and_each_move(location: Location) -> None:
    writing, reading = await open_store(location), await open_store(location)
    try:
        for i in range(20):
            await leases.submit(writing, f"q{i:02d}", {**SUBMITTED, "run_id": f"q{i:02d}"})
        fleet, alerts = Fleet(), Alerts()
        await refreshed_until(fleet, reading, lambda: len(fleet.rows) == 20)
        queued = fleet.rows["q00"]
        assert (queued.shown_state, queued.env, queued.script, queued.model) == (
            "queued", "shared_orders", "solve", "scripted"
        )  # fmt: skip
        assert queued.live and queued.where == "" and queued.started_at is not None
        assert alerts.check(fleet, datetime.now(UTC)) == []  # the first look says nothing

        first = await leases.claim(writing, A, 30)
        assert first is not None and first.run_id == "q00"
        await refreshed_until(fleet, reading, lambda: fleet.rows["q00"].placement == "held")
        held = fleet.rows["q00"]
        assert (held.shown_state, held.where, held.move) == ("held", "host-a", "started on host-a")
        # only the lease that moved was read again (PostgreSQL: also any row of a
        # transaction still open at the last read)
        assert 1 <= fleet.last_placed <= (1 if writing.backend == "sqlite" else 5)
        assert fleet.rows["q01"].shown_state == "queued"

        # host-a's lease runs out; host-b takes the run and starts writing it
        await writing.execute(
            "UPDATE leases SET expires_at = ? WHERE run_id = 'q00'", (time.time() - 5,)
        )
        moved = await leases.claim(writing, B, 30)
        assert moved is not None and moved.run_id == "q00"
        writer = EventWriter(writing, fence=("q00", moved.epoch))
        writer(RunStarted(run_id="q00", seq=1, env="shared_orders", script="solve",
                          model="scripted", mode="rounds", goal="g", budget={}))  # fmt: skip
        await writer.close()
        await refreshed_until(
            fleet,
            reading,
            lambda: fleet.rows["q00"].placed_on == "host-b" and fleet.rows["q00"].state,
        )
        row = fleet.rows["q00"]
        assert row.move.startswith("resumed on host-b after host-a's lease expired")
        assert row.shown_state == row.state and row.where.startswith(row.runner) and row.runner
        said = [a.text for a in alerts.check(fleet, datetime.now(UTC))]
        assert said == [f"run q00 {row.move}"]  # the move, once
        assert alerts.check(fleet, datetime.now(UTC)) == []

        # it waits on its operator past the bound: parked, on no host
        assert await leases.let_go(writing, "q00", moved.epoch, leases.PARKED, "parked by host-b")
        await refreshed_until(fleet, reading, lambda: fleet.rows["q00"].placement == "parked")
        parked = fleet.rows["q00"]
        assert (parked.shown_state, parked.where, parked.live) == ("parked", "", True)
        # a renewal writes only the lease's expiry: nothing for the fleet to read
        await writing.execute("UPDATE leases SET expires_at = ? WHERE run_id = 'q01'", (1.0,))
        changed, _ = await feed.placements_changed(reading, fleet.placed_cursor)
        assert "q01" not in {lease["run_id"] for lease in changed}
    finally:
        await writing.close()
        await reading.close()


_OLDER = {
    "sqlite": (
        "DROP TRIGGER leases_feed_insert",
        "DROP TRIGGER leases_feed_update",
        "DROP INDEX leases_changed",
        "ALTER TABLE leases DROP COLUMN changed",
    ),
    "postgresql": (
        "DROP TRIGGER loopdeck_lease_changed ON leases",
        "ALTER TABLE leases DROP COLUMN changed",
    ),
}


async def test_a_store_from_before_v7_lists_its_leases(location: Location) -> None:
    store = await open_store(location)
    try:
        await leases.submit(store, "old1", {**SUBMITTED, "run_id": "old1"})
        for statement in _OLDER[store.backend]:
            await store.execute(statement)
        await store.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    finally:
        await store.close()
    store, writing = await open_store(location), await open_store(location)  # now v7
    try:
        [version] = await store.fetchall("SELECT value FROM meta WHERE key = 'schema_version'")
        assert version[0] == str(SCHEMA_VERSION)
        fleet = Fleet()
        await fleet.refresh(store)
        assert fleet.rows["old1"].shown_state == "queued"
        await leases.submit(writing, "new1", {**SUBMITTED, "run_id": "new1"})
        await refreshed_until(fleet, store, lambda: "new1" in fleet.rows)
        assert fleet.rows["new1"].shown_state == "queued" and fleet.last_placed == 1
    finally:
        await store.close()
        await writing.close()
