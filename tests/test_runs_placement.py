"""`loopdeck runs` lists every run a worker holds or will (issue 42): a run submitted and not
claimed yet as `queued` (it has no run row until then), a parked one as `parked` with the
host that parked it, a held one with its worker's host, on SQLite and on PostgreSQL (`make
stress`); and it reads the store a fixed number of times whatever the number of runs (issue
43)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from loopdeck.cli import main
from loopdeck.operator import records
from loopdeck.operator.records import RunEntry
from loopdeck.store import leases
from loopdeck.store.base import Location
from loopdeck.store.leases import WorkerName
from loopdeck.store.opening import open_store

OPTIONS = {"env": "order_support", "script": "solve", "model": "scripted"}


async def _runs_row(store: records.Store, run_id: str, started: str) -> None:
    await store.execute(
        "INSERT INTO runs (run_id, env, script, model, mode, goal, state, started_at)"
        " VALUES (?, 'order_support', 'solve', 'scripted', 'rounds', 'g', 'awaiting_approval', ?)",
        (run_id, started),
    )


async def _placed_store(db: Location) -> None:
    """`queued1` submitted only; `parked1` claimed by host-a then parked; `held1` claimed by
    host-b and held; `own1` a run of its own process, never submitted."""
    store = await open_store(db)
    try:
        for run_id in ("parked1", "held1", "queued1"):
            await leases.submit(store, run_id, {**OPTIONS, "run_id": run_id})
        for run_id, host in (("parked1", "host-a"), ("held1", "host-b")):
            await _runs_row(store, run_id, "2026-12-01T10:00:00+00:00")
            claim = await leases.claim(store, WorkerName(host, 4242, "t0k3n"), 60.0)
            assert claim is not None and claim.run_id == run_id
        await leases.let_go(store, "parked1", 1, leases.PARKED, "parked by host-a")
        await store.execute(
            "INSERT INTO runs (run_id, env, script, model, mode, goal, state, stop_reason,"
            " started_at) VALUES ('own1', 'order_support', 'solve', 'scripted', 'rounds', 'g',"
            " 'stopped', 'goal_met', '2026-12-01T09:00:00+00:00')"
        )
    finally:
        await store.close()


def test_runs_lists_queued_parked_and_held_runs_with_their_host(db, capsys, monkeypatch) -> None:
    asyncio.run(_placed_store(db))
    assert main(["runs", "--db", str(db), "--json"]) == 0
    listed = {run["run_id"]: run for run in json.loads(capsys.readouterr().out)}
    assert next(iter(listed)) == "queued1"  # not started: newest of all
    assert listed["queued1"]["state"] == "queued" and listed["queued1"]["host"] is None
    assert listed["queued1"]["placement"]["state"] == "queued"
    assert listed["queued1"]["env"] == "order_support" and listed["queued1"]["started_at"] is None
    assert listed["parked1"]["placement"] == {
        "state": "parked", "host": "host-a", "note": "parked by host-a",
        "submitted_at": listed["parked1"]["placement"]["submitted_at"],
    }  # fmt: skip
    assert listed["held1"]["placement"]["state"] == "held"
    assert listed["held1"]["host"] == "host-b"  # the claim names its worker on the run's row
    assert "placement" not in listed["own1"]  # a run of its own process: keys as they were

    for width, parked in ((200, "parked (awaiting_approval)"), (80, "parked")):
        monkeypatch.setenv("COLUMNS", str(width))
        assert main(["runs", "--db", str(db)]) == 0
        table = capsys.readouterr().out
        lines = {line.split()[0]: line for line in table.splitlines() if line.split()[:1]}
        assert " queued " in lines["queued1"]
        assert f" {parked} " in lines["parked1"]
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["runs", "--db", str(db)]) == 0
    lines = {
        line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.split()[:1]
    }
    assert "host-b:4242" in lines["held1"]
    assert "host-a" not in lines["parked1"]  # no worker runs it: its note (--json) names its last


def test_runs_are_typed_entries(db) -> None:
    asyncio.run(_placed_store(db))

    async def listed() -> list[RunEntry]:
        async with records.opened(db) as store:
            return await records.runs(store)

    runs = asyncio.run(listed())
    assert all(isinstance(run, RunEntry) for run in runs)
    by_id = {run.run_id: run for run in runs}
    assert by_id["queued1"].shown_state == "queued" and by_id["queued1"].runner == "-"
    assert by_id["parked1"].shown_state == "parked" and by_id["parked1"].live
    assert by_id["parked1"].runner == "-"  # no worker holds it (its note names its last)
    assert by_id["own1"].placement is None and by_id["own1"].shown_state == "stopped"


class CountingStore:
    """A store whose reads are counted."""

    def __init__(self, store: records.Store) -> None:
        self.store, self.reads = store, 0

    async def fetchall(self, sql: str, params: object = ()) -> list[object]:
        self.reads += 1
        return await self.store.fetchall(sql, params)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)


def _reads_listing(db: Path, runs: int) -> int:
    async def counted() -> int:
        store = await open_store(db)
        try:
            async with store.transaction() as tx:
                for i in range(runs):
                    await tx.execute(
                        "INSERT INTO runs (run_id, env, script, model, mode, goal, state,"
                        " stop_reason, started_at) VALUES (?, 'e', 's', 'm', 'rounds', 'g',"
                        " 'stopped', 'goal_met', '2026-12-01T09:00:00+00:00')",
                        (f"run{i}",),
                    )
                    await tx.execute(
                        "INSERT INTO approvals (run_id, call_id, tool, args, state, outcome)"
                        " VALUES (?, 'c1', 't', '{}', 'approved', 'outcome_unknown')",
                        (f"run{i}",),
                    )
            counting = CountingStore(store)
            listed = await records.runs(counting)  # type: ignore[arg-type]
            assert [run.outcome_unknown for run in listed] == [("c1",)] * runs
            return counting.reads
        finally:
            await store.close()

    return asyncio.run(counted())


def test_the_listing_reads_the_store_the_same_number_of_times_for_3_runs_or_300(
    tmp_path,
) -> None:
    assert _reads_listing(tmp_path / "a.db", 3) == _reads_listing(tmp_path / "b.db", 300)
