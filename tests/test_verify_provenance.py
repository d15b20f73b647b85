"""What `verify` must not pass: events no hash vouches for in a store whose `chain_since` was
taken away (every store since schema 5 has it), a run's row that says another stop than its
log, and a run still being written (its row read first: events committed while it reads are
past it, never a gap). Beside it: a run whose worker stopped renewing its lease is said so
in `runs`, and a trace that failed to send names the store to send it from again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
from test_log_chain import _run, _sql, _verify

from loopdeck.core.events import StateChanged
from loopdeck.core.states import RunState
from loopdeck.store import leases, queries, verification
from loopdeck.store.base import Location
from loopdeck.store.opening import open_store
from loopdeck.store.writer import EventWriter


def test_events_without_a_hash_where_the_store_lost_its_chain_since_are_a_break(capsys, db) -> None:
    run_id = _run(capsys, db)
    _sql(
        db,
        ("UPDATE events SET hash = NULL WHERE run_id = ?", (run_id,)),
        ("DELETE FROM meta WHERE key = 'chain_since'", ()),
    )
    code, text, found = _verify(capsys, run_id, "--db", str(db))
    assert code == 1 and not found["intact"], text
    [proof] = found["runs"]
    assert not proof["intact"] and proof["broken"]["seq"] == 1
    assert "`chain_since`, which every store since schema 5 has, is gone" in text


def test_a_run_with_events_from_before_the_chain_is_never_counted_intact(capsys, db) -> None:
    run_id = _run(capsys, db)
    _sql(
        db,
        ("UPDATE events SET hash = NULL", ()),
        ("UPDATE meta SET value = '4' WHERE key = 'schema_version'", ()),
        ("DELETE FROM meta WHERE key = 'chain_since'", ()),
    )
    code, text, found = _verify(capsys, run_id, "--db", str(db))  # migrated as it opens
    assert code == 0, text  # said, not a break: the store says its chain began after them
    [proof] = found["runs"]
    assert proof["broken"] is None and proof["unchained"] > 0 and proof["intact"] is False


def test_a_runs_row_that_says_another_stop_than_its_log_is_named(capsys, db) -> None:
    run_id = _run(capsys, db)
    code, text, _ = _verify(capsys, run_id, "--db", str(db))
    assert code == 0, text
    _sql(db, ("UPDATE runs SET state = 'failed', stop_reason = 'killed' WHERE run_id = ?",
              (run_id,)))  # fmt: skip
    code, text, found = _verify(capsys, "--db", str(db))
    assert code == 1, text
    broken = found["runs"][0]["broken"]
    assert broken["what"] == "edited" and "the run's row says state 'failed'" in broken["detail"]
    assert "its stop says 'complete', 'goal_met': the row was changed" in broken["detail"]


async def _state_changes(db: Location, run_id: str, first: int, last: int) -> None:
    store = await open_store(db)
    try:
        writer = EventWriter(store)
        for seq in range(first, last + 1):
            writer(StateChanged(run_id=run_id, seq=seq, source=RunState.READY,
                                target=RunState.PLANNING))  # fmt: skip
        await writer.flush()
    finally:
        await store.close()


async def test_a_run_written_while_it_is_verified_is_not_called_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its events read, then more committed before its row is read: nothing is missing."""
    db = tmp_path / "s.db"
    await _state_changes(db, "r-live", 1, 5)
    _sql(db, ("INSERT INTO runs (run_id, state, last_seq) VALUES ('r-live', 'executing', 5)", ()))
    read = verification.stored_rows
    last = [5]

    async def then_more(store: Any, run_id: str) -> AsyncGenerator[Any, None]:
        async for row in read(store, run_id):
            yield row
        # the runner commits three more as the rows were being read
        await _state_changes(db, "r-live", last[0] + 1, last[0] + 3)
        last[0] += 3
        _sql(db, ("UPDATE runs SET last_seq = ? WHERE run_id = 'r-live'", (last[0],)))

    monkeypatch.setattr(verification, "stored_rows", then_more)
    store = await open_store(db)
    try:
        proof = await verification.verify_run(store, "r-live")
        assert proof.broken is None and proof.events == 5
        [proof] = await verification.verify_store(store)
        assert proof.broken is None and proof.events == 8
    finally:
        await store.close()


async def test_a_run_whose_lease_ran_out_is_said_to_wait_for_a_worker(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "s.db")
    try:
        await leases.submit(store, "r-held", {"env": "x"})
        claim = await leases.claim(store, leases.WorkerName("host-a", 1, "gone"), 0.001)
        assert claim is not None
        await asyncio.sleep(1.1)
        [row] = await queries.placements(store, "r-held")
        assert row["state"] == "held"
        assert row["note"].startswith("its lease by host-a expired ")
        assert "it waits for a worker to take it up" in row["note"]
        await leases.submit(store, "r-new", {"env": "x"})
        fresh = await leases.claim(store, leases.WorkerName("host-b", 2, "alive"), 60)
        assert fresh is not None and fresh.run_id in ("r-held", "r-new")
        for row in await queries.placements(store):
            if row["run_id"] == fresh.run_id:  # held and renewed: its note as it was
                assert "waits for a worker" not in str(row["note"])
    finally:
        await store.close()


def test_a_trace_that_failed_to_send_names_the_store_to_send_it_from(
    monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path
) -> None:
    from loopdeck.cli.runs import send_trace
    from loopdeck.operator.otel_export import ExportFailed, LiveTrace

    def refused(self: LiveTrace) -> Any:
        raise ExportFailed("cannot send the trace to http://127.0.0.1:9/v1/traces: refused")

    monkeypatch.setattr(LiveTrace, "send", refused)
    trace = LiveTrace("http://127.0.0.1:9")
    send_trace(trace, "r1", tmp_path / "my runs.db")
    send_trace(trace, "r1", "postgresql://me:secret@db.example/loopdeck")
    said = capsys.readouterr().err.splitlines()
    where = tmp_path / "my runs.db"
    assert said[0].endswith(
        f"`loopdeck export r1 --otlp http://127.0.0.1:9/v1/traces --db '{where}'`"
    )
    assert said[1].endswith("--db postgresql://me@db.example/loopdeck`")  # no password
    assert "secret" not in said[1]


def test_json_keeps_its_shape() -> None:
    assert set(verification.RunProof("r").as_json()) == {
        "run_id", "events", "unchained", "head", "broken", "intact"
    }  # fmt: skip
    assert json.dumps(verification.RunProof("r").as_json())


def test_an_export_cut_short_says_after_which_event(capsys, tmp_path: Path) -> None:
    """An export says, on its first line, how far the run's events it holds go: a file cut
    short (whole lines, or inside its last) is broken where it was cut. An export from before
    it said so is verified as before: intact as far as it goes."""
    from test_log_chain import _loopdeck

    from loopdeck.store.chain import exported, from_export

    db = tmp_path / "s.db"
    run_id = _run(capsys, db)
    code, out = _loopdeck(capsys, "export", run_id, "--db", str(db))
    lines = out.splitlines()
    assert code == 0 and len(lines) > 10
    assert [json.loads(line).get("export_through") for line in lines[:2]] == [len(lines), None]
    export = tmp_path / "run.jsonl"
    export.write_text(out)
    code, text, found = _verify(capsys, "--export", str(export))
    assert code == 0 and found["intact"] and found["runs"][0]["events"] == len(lines), text

    kept = len(lines) - 3
    export.write_text("\n".join(lines[:kept]) + "\n")  # its last three lines cut off
    code, text, found = _verify(capsys, "--export", str(export))
    assert code == 1 and found["runs"][0]["broken"]["seq"] == kept + 1, text
    assert f"{run_id}: event {kept + 1} removed: the file was cut short after event {kept}" in text

    export.write_text("\n".join(lines[:kept]) + "\n" + lines[kept][:40])  # inside a line
    code, text, found = _verify(capsys, "--export", str(export))
    assert code == 1 and found["runs"][0]["broken"]["seq"] == kept + 1, text
    assert f"the file was cut short after event {kept} (its line {kept + 1} ends" in text

    older = [exported(*from_export(line)[:3]) for line in lines]  # as an export wrote it before
    assert older[1:] == lines[1:]
    export.write_text("\n".join(older[:kept]) + "\n")
    code, text, found = _verify(capsys, "--export", str(export))
    assert code == 0 and found["runs"][0]["events"] == kept, text
    assert "not the run's stop: the run goes on, or its last events were cut off" in text
