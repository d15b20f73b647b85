"""Ten runners on ten "hosts" sharing one PostgreSQL store, one console on the fleet, the
approvals given from the CLI: every run ends as it should and no event is lost."""

from __future__ import annotations

import pytest
from conftest import SAMPLES, fresh_pg_database
from console_helpers import wait_until
from store_helpers import last_json, loopdeck, start_runner

from loopdeck.store.opening import open_store
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.fleet_screen import FleetScreen

RUNNERS = 10


@pytest.mark.slow
async def test_ten_hosts_one_console_approvals_from_the_cli(monkeypatch) -> None:
    url = fresh_pg_database(monkeypatch)
    runners = [
        start_runner(
            SAMPLES / "order_support",
            "solve",
            url,
            "--approve",
            "wait",
            environ={"LOOPDECK_HOST": f"host-{i:02d}"},
        )
        for i in range(RUNNERS)
    ]
    try:
        app = LoopdeckApp(ConsoleStart.for_fleet(url))
        async with app.run_test(size=(200, 60)) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
            fleet = app.screen
            rows = fleet.fleet.rows
            # every runner's write waits, and the fleet says so, with the runner's host
            await wait_until(
                pilot,
                lambda: len(rows) == RUNNERS and all(r.pending == 1 for r in rows.values()),
                timeout=120,
            )
            hosts = sorted(row.runner.split(":")[0] for row in rows.values())
            assert hosts == [f"host-{i:02d}" for i in range(RUNNERS)]
            pending = last_json(loopdeck("pending", "--json", db=url).stdout)
            assert len(pending) == RUNNERS
            for item in pending:
                approved = loopdeck("approve", item["run_id"], item["call_id"], db=url)
                assert approved.returncode == 0, approved.stderr
            await wait_until(
                pilot,
                lambda: all(r.stop_reason == "goal_met" for r in rows.values()),
                timeout=120,
            )
            assert fleet.fleet.waiting == 0
        outcomes = [last_json(runner.communicate(timeout=120)[0]) for runner in runners]
    finally:
        for runner in runners:
            runner.kill()
    assert [o["stop_reason"] for o in outcomes] == ["goal_met"] * RUNNERS
    store = await open_store(url, create=False)
    try:
        for outcome in outcomes:
            rows = await store.fetchall(
                "SELECT seq, kind FROM events WHERE run_id = ? ORDER BY seq", (outcome["run_id"],)
            )
            seqs = [row["seq"] for row in rows]
            assert seqs == list(range(1, len(seqs) + 1))
            assert rows[-1]["kind"] == "run_stopped"
            assert sum(row["kind"] == "approval_decided" for row in rows) == 1
    finally:
        await store.close()
