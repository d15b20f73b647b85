"""A log that proves itself (issue 41): every event's row carries its hash, chained to the
run's previous event (`store/chain.py`); `loopdeck verify` names the first event edited,
removed or reordered, with its run and number, in the store (SQLite and PostgreSQL) and in
an export file; events from before the chain are said, never passed as verified."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any, get_args

import pytest

from loopdeck.cli import main
from loopdeck.core.events import EVENT_ADAPTER, Event, EventBase, StateChanged
from loopdeck.core.states import RunState
from loopdeck.store import queries
from loopdeck.store import writer as writer_module
from loopdeck.store.base import Location
from loopdeck.store.chain import CHAIN_FIELDS, GENESIS, link
from loopdeck.store.event_rows import event_row
from loopdeck.store.opening import open_store
from loopdeck.store.verification import EDITED, REMOVED, REORDERED
from loopdeck.store.writer import EventWriter


def _loopdeck(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, _ = capsys.readouterr()
    return code, out


def _run(capsys: pytest.CaptureFixture[str], db: Location) -> str:
    """A whole scripted run recorded in the store: 46 events, two approved writes."""
    code, out = _loopdeck(capsys, "run", "service_outage", "--headless", "--json", "--db", str(db))
    assert code == 0, out
    return str(json.loads(out.splitlines()[-1])["run_id"])


def _verify(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, dict[str, Any]]:
    code, out = _loopdeck(capsys, "verify", *argv, "--json")
    lines = out.splitlines()
    return code, "\n".join(lines[:-1]), json.loads(lines[-1])


def _sql(db: Location, *statements: tuple[str, tuple[Any, ...]]) -> list[Any]:
    """Statements straight into the store's database, as someone editing it would; the rows
    the last one reads."""
    if isinstance(db, str):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            rows: list[Any] = []
            for sql, params in statements:
                cursor = conn.execute(sql.replace("?", "%s"), params)
                rows = cursor.fetchall() if cursor.description else []
            return rows
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for sql, params in statements:
            rows = conn.execute(sql, params).fetchall()
        return rows
    finally:
        conn.close()


def test_an_untouched_run_verifies_and_ends_at_its_last_hash(capsys, db) -> None:
    run_id = _run(capsys, db)
    rows = _sql(db, ("SELECT seq, body, hash FROM events WHERE run_id = ? ORDER BY seq", (run_id,)))
    assert [row[0] for row in rows] == list(range(1, len(rows) + 1)) and len(rows) > 20
    prev = GENESIS  # the chain made again here, from its definition
    for _, body, digest in rows:
        assert digest == link(prev, body)
        prev = digest
    code, text, found = _verify(capsys, run_id, "--db", str(db))
    assert code == 0 and found["intact"], text
    assert found["runs"] == [
        {"run_id": run_id, "events": len(rows), "unchained": 0, "head": prev, "broken": None,
         "intact": True}
    ]  # fmt: skip
    assert f"{run_id}: intact: {len(rows)} events" in text and prev in text


# Each `?` is the tampered run's id.
SWAP = (
    "UPDATE events SET seq = -1 WHERE run_id = ? AND seq = 7",
    "UPDATE events SET seq = 7 WHERE run_id = ? AND seq = 8",
    "UPDATE events SET seq = 8 WHERE run_id = ? AND seq = -1",
)
LAST = "(SELECT MAX(seq) FROM events WHERE run_id = ?)"
TAMPERING: dict[str, tuple[tuple[str, ...], int | None, str, str]] = {
    "edited": (
        ("UPDATE events SET body = replace(body, '\"kind\"', '\"kind\" ')"
         " WHERE run_id = ? AND seq = 7",),
        7, EDITED, "its content does not match its hash",
    ),
    "deleted": (("DELETE FROM events WHERE run_id = ? AND seq = 7",), 7, REMOVED,
                "event 7 is missing"),
    "swapped": (SWAP, 7, REORDERED, "the row numbered 7 holds event 8"),
    "the last deleted": (
        (f"DELETE FROM events WHERE run_id = ? AND seq = {LAST}",), None, REMOVED,
        "is missing: the run's row says its events go to",
    ),
    "a time edited": (
        ("UPDATE events SET at = '2020-01-01T00:00:00+00:00' WHERE run_id = ? AND seq = 7",),
        7, EDITED, "at 2020-01-01T00:00:00+00:00, its event",
    ),
    "a hash taken away": (("UPDATE events SET hash = NULL WHERE run_id = ? AND seq = 7",), 7,
                          EDITED, "its hash is gone"),
}  # fmt: skip


@pytest.mark.parametrize("tampering", list(TAMPERING))
def test_the_first_event_edited_removed_or_reordered_is_named(capsys, db, tampering) -> None:
    """Another run in the store stays intact; the tampered one is named with its number."""
    run_id, other = _run(capsys, db), _run(capsys, db)
    last = _sql(db, ("SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,)))[0][0]
    statements, numbered, what, detail = TAMPERING[tampering]
    _sql(db, *((sql, (run_id,) * sql.count("?")) for sql in statements))
    seq = last if numbered is None else numbered
    code, text, found = _verify(capsys, "--db", str(db))
    assert code == 1 and not found["intact"], text
    proofs = {proof["run_id"]: proof for proof in found["runs"]}
    assert proofs[other]["intact"] and proofs[other]["broken"] is None
    broken = proofs[run_id]["broken"]
    assert (broken["seq"], broken["what"]) == (seq, what) and detail in broken["detail"], broken
    assert proofs[run_id]["events"] == seq - 1  # the events before it are proven
    said = next(line for line in text.splitlines() if line.startswith(f"{run_id}: "))
    assert said.startswith(f"{run_id}: event {seq} {what}: ") and detail in said
    code, text, found = _verify(capsys, run_id, "--db", str(db))
    assert code == 1 and found["runs"][0]["broken"] == broken


def test_a_store_from_before_the_chain_says_so_and_chains_what_comes_after(capsys, db) -> None:
    old = _run(capsys, db)
    count = _sql(db, ("SELECT COUNT(*) FROM events WHERE run_id = ?", (old,)))[0][0]
    _sql(
        db,
        ("UPDATE events SET hash = NULL", ()),  # a schema-4 store's rows: no hash
        ("UPDATE meta SET value = '4' WHERE key = 'schema_version'", ()),
        ("DELETE FROM meta WHERE key = 'chain_since'", ()),
    )
    code, text, found = _verify(capsys, "--db", str(db))  # opening it brings it to schema 5
    assert code == 0 and found["intact"], text
    assert found["runs"][0] | {"head": None} == {
        "run_id": old, "events": count, "unchained": count, "head": None, "broken": None,
        "intact": False,  # said, never counted as intact (the exit stands: nothing broken)
    }  # fmt: skip
    assert f"events 1 to {count} are from before the chain began: not verified" in text
    assert "1 with events from before the chain (not verified)" in text

    new = _run(capsys, db)  # written after the migration: chained, and verified
    asyncio.run(_mark_crashed(db, old))  # a reader's event after the old ones starts a chain
    code, text, found = _verify(capsys, "--db", str(db))
    proofs = {proof["run_id"]: proof for proof in found["runs"]}
    assert code == 0 and proofs[new]["unchained"] == 0 and proofs[new]["intact"], text
    assert proofs[old]["unchained"] == count and proofs[old]["events"] == count + 1
    assert f"{old}: intact from event {count + 1}" in text

    # Taking every hash off a run written since cannot pass it off as one from before.
    _sql(db, ("UPDATE events SET hash = NULL WHERE run_id = ?", (new,)))
    code, text, found = _verify(capsys, new, "--db", str(db))
    broken = found["runs"][0]["broken"]
    assert code == 1 and (broken["seq"], broken["what"]) == (1, EDITED), text
    assert "not from before the chain began" in broken["detail"]


async def _mark_crashed(db: Location, run_id: str) -> None:
    store = await open_store(db)
    try:
        await store.execute("UPDATE runs SET state = 'executing' WHERE run_id = ?", (run_id,))
        assert await queries.mark_crashed(store, run_id, "its runner is gone")
    finally:
        await store.close()


def _state_changes(run_id: str, first: int, last: int) -> list[EventBase]:
    return [
        StateChanged(run_id=run_id, seq=seq, source=RunState.READY, target=RunState.PLANNING)
        for seq in range(first, last + 1)
    ]


async def _write(db: Location, run_id: str) -> None:
    """A run written the three ways events come: the runner's writer (its links made as the
    events are queued, one made at the commit for an event that failed to serialize then),
    a reader's crash mark that the live runner undoes, and events brought back from a spill
    by another writer (its head read from the store)."""
    store = await open_store(db)
    try:
        writer = EventWriter(store)
        for event in _state_changes(run_id, 1, 5):
            writer(event)
        await writer.flush()
        for event in _state_changes(run_id, 6, 9):  # 6 fails to serialize as it is queued
            writer(event)
        await writer.flush()
        await store.execute(  # the run's row, as its RunStarted would have made it
            "INSERT INTO runs (run_id, state, last_seq) VALUES (?, 'executing', 9)", (run_id,)
        )
        assert await queries.mark_crashed(store, run_id, "a reader thought it gone")
        for event in _state_changes(run_id, 10, 12):  # the runner is alive: the mark goes
            writer(event)
        await writer.flush()
        await EventWriter(store).write_back(_state_changes(run_id, 13, 15))
    finally:
        await store.close()


def test_every_writer_of_a_runs_events_keeps_one_chain(capsys, db, monkeypatch) -> None:
    failed: list[int] = []

    def flaky(event: Any) -> Any:
        if event.seq == 6 and not failed:
            failed.append(event.seq)
            raise ValueError("serializing failed this once")
        return event_row(event)

    monkeypatch.setattr(writer_module, "event_row", flaky)
    asyncio.run(_write(db, "r-mixed"))
    assert failed == [6]
    rows = _sql(db, ("SELECT seq, origin FROM events WHERE run_id = 'r-mixed' ORDER BY seq", ()))
    assert rows == [(seq, None) for seq in range(1, 16)]  # the reader's mark undone
    code, text, found = _verify(capsys, "r-mixed", "--db", str(db))
    assert code == 0 and found["runs"][0]["events"] == 15, text


def test_an_export_carries_the_chain_and_a_file_is_verified_as_the_store(
    capsys, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    run_id = _run(capsys, db)
    code, out = _loopdeck(capsys, "export", run_id, "--db", str(db))
    lines = out.splitlines()
    assert code == 0 and all('"hash":"' in line for line in lines)
    events = [EVENT_ADAPTER.validate_json(line) for line in lines]  # still read as events
    assert [event.seq for event in events] == list(range(1, len(lines) + 1))
    export = tmp_path / "run.jsonl"
    export.write_text(out)
    code, text, found = _verify(capsys, "--export", str(export))
    assert code == 0 and found["runs"][0]["events"] == len(lines), text
    stored = _verify(capsys, run_id, "--db", str(db))[2]["runs"][0]["head"]
    assert found["runs"][0]["head"] == stored

    edited = [*lines]
    edited[4] = edited[4].replace('"kind"', '"kind" ', 1)
    swapped = [*lines[:6], lines[7], lines[6], *lines[8:]]
    for changed, seq, what in (
        (edited, 5, EDITED),
        ([*lines[:4], *lines[5:]], 5, REMOVED),
        (swapped, 7, REORDERED),
    ):
        export.write_text("\n".join(changed) + "\n")
        code, text, found = _verify(capsys, "--export", str(export))
        broken = found["runs"][0]["broken"]
        assert code == 1 and (broken["seq"], broken["what"]) == (seq, what), text


def test_an_export_saved_again_or_stripped_of_its_hashes_is_never_passed(
    capsys, tmp_path: Path
) -> None:
    """An export re-saved by a JSON tool (its hashes there, spaced otherwise) cannot be checked:
    refused by name. One stripped of every hash vouches for nothing (a file cannot say its
    events are from before the chain): exit 1, "not verified", whatever was edited. One cut
    short says where (`test_verify_provenance.py` has more)."""
    db = tmp_path / "s.db"
    run_id = _run(capsys, db)
    lines = _loopdeck(capsys, "export", run_id, "--db", str(db))[1].splitlines()
    events = [json.loads(line) for line in lines]
    export = tmp_path / "run.jsonl"

    # nothing changed but the spacing json.dumps gives
    export.write_text("".join(json.dumps(event) + "\n" for event in events))
    code = main(["verify", "--export", str(export)])
    said = capsys.readouterr().err
    assert code == 2 and "line 1 has a hash, but not as `loopdeck export` wrote it" in said

    for event in events:
        del event["hash"]
    events[5]["seq_note"] = "edited"  # an edit no hash can catch any more
    export.write_text("".join(json.dumps(event, separators=(",", ":")) + "\n" for event in events))
    code, text, found = _verify(capsys, "--export", str(export))
    assert code == 1 and found["intact"] is False, text
    assert "without a hash (a file vouches for none (not verified))" in text, text

    export.write_text("\n".join(lines[:-3]) + "\n")  # its last three events cut off
    code, text, found = _verify(capsys, "--export", str(export))
    assert code == 1 and found["runs"][0]["broken"]["what"] == REMOVED, text
    assert f"the file was cut short after event {len(lines) - 3}" in text


def test_the_fields_an_export_adds_are_none_of_an_events_own() -> None:
    """An export adds `hash` (and `origin`) as a body's last fields: no event has them, so a
    line's own fields are never taken for the chain's."""
    classes: tuple[type[EventBase], ...] = get_args(get_args(Event)[0])
    assert len(classes) > 20
    assert [cls for cls in classes if not CHAIN_FIELDS.isdisjoint(cls.model_fields)] == []


def test_what_cannot_be_verified_is_refused_by_name(capsys, tmp_path: Path) -> None:
    not_an_export = tmp_path / "notes.jsonl"
    not_an_export.write_text('{"run_id": "r", "seq": 1}\nnot json\n')
    code = main(["verify", "--export", str(not_an_export)])
    assert code == 2 and "line 2 is not an event of a loopdeck export" in capsys.readouterr().err
    code = main(["verify", "--export", str(tmp_path / "missing.jsonl")])
    assert code == 2 and "missing.jsonl: cannot be read" in capsys.readouterr().err
    code = main(["verify", "r1", "--export", str(not_an_export)])
    assert code == 2 and "reads the file alone" in capsys.readouterr().err


def test_a_resolve_after_a_runs_stop_is_not_taken_for_a_run_going_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Resolving a finished run's unknown outcome appends after its stop: its stop is still
    among its events, and verify says nothing of a run that goes on."""
    db = str(tmp_path / "s.db")
    code, out = _loopdeck(capsys, "run", "order_support", "--script", "unknown-outcome",
                          "--headless", "--approve", "auto", "--json", "--db", db)  # fmt: skip
    run_id = json.loads(out.splitlines()[-1])["run_id"]
    assert _loopdeck(capsys, "resolve", run_id, "c2", "applied", "--db", db)[0] == 0
    code, text, found = _verify(capsys, run_id, "--db", db)
    assert code == 0 and found["intact"] is True, text
    assert "not the run's stop" not in text, text


def test_resolving_a_finished_runs_write_promises_no_model_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "s.db")
    code, out = _loopdeck(capsys, "run", "order_support", "--script", "unknown-outcome",
                          "--headless", "--approve", "auto", "--json", "--db", db)  # fmt: skip
    run_id = json.loads(out.splitlines()[-1])["run_id"]
    code, out = _loopdeck(capsys, "resolve", run_id, "c2", "not-applied", "--db", db)
    assert code == 0 and out.strip() == "c2: not-applied (recorded as failed)"


@pytest.mark.parametrize("case", ["as queued", "one not linked", "one after another tail"])
def test_a_batchs_rows_follow_each_other_from_the_runs_head_however_they_were_queued(
    case: str,
) -> None:
    """The writer's chain keeps the hashes made as the events were queued only where each
    follows the hash before it; from the first that does not, the rows are linked again."""
    from loopdeck.store.chain import RunChain

    chain = RunChain()
    events = [StateChanged(run_id="r-c", seq=seq, source=RunState.DECIDING,
                           target=RunState.EXECUTING) for seq in range(1, 7)]  # fmt: skip
    queued = []
    for event in events:
        if case == "one after another tail" and event.seq == 4:
            chain.tail_hash = link(GENESIS, "a tail this batch does not follow")
        after = chain.tail_hash
        row = chain.queued(event.seq, event_row(event))
        if case == "one not linked" and event.seq == 3:
            row = (*row[:5], None)
        queued.append((event, after, row))
    rows = asyncio.run(chain.rows(None, "r-c", 1, queued))  # type: ignore[arg-type]
    expected, prev = [], GENESIS
    for event in events:
        prev = link(prev, event.as_json())
        expected.append(prev)
    assert [row[5] for row in rows] == expected
    assert [row[:5] for row in rows] == [event_row(event) for event in events]
