"""`loopdeck runs` and `loopdeck pending` at 80 and 100 columns: the least useful columns give
way (a shorter time, a column dropped, the arguments cut), never an id or a time."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopdeck.cli import main
from loopdeck.store import outcome_queries
from loopdeck.store.liveness import this_host
from loopdeck.store.opening import open_store

WIDTHS = pytest.mark.parametrize("width", [80, 100, 200])
# Call ids as the providers make them: OpenAI's and Anthropic's.
CALLS = {
    "call_8f2KQp1xZr7TnV0aYbW3cD4e": "0022a4e57a64",
    "toolu_01XyZabcdefghijklmnopq": "b1b47b3167ed",
}


async def _store(db: Path) -> None:
    """Two live runs of this process (one paused), each with a write waiting, and one ended
    run with an outcome unknown; long names everywhere, as real envs and models have."""
    now = datetime.now(UTC)
    store = await open_store(db)
    try:
        for run_id, env, script, model, state, stop, paused in (
            ("0022a4e57a64", "order_support", "wrong-guess", "openai/gpt-4o-mini",
             "awaiting_approval", None, 1),
            ("b1b47b3167ed", "service_outage", "solve", "anthropic/claude-sonnet-4-5",
             "awaiting_approval", None, 0),
            ("9c0ffee00042", "service_outage", "wrong-guess", "scripted", "stopped",
             "provider_failure", 0),
        ):  # fmt: skip
            await store.execute(
                "INSERT INTO runs (run_id, env, script, model, mode, goal, state, stop_reason,"
                " started_at, tokens, cost_usd, pid, host, heartbeat_at, paused) VALUES"
                " (?, ?, ?, ?, 'rounds', 'g', ?, ?, ?, 123456, 0.5, ?, ?, ?, ?)",
                (run_id, env, script, model, state, stop, now.isoformat(),
                 os.getpid() if stop is None else None, this_host() if stop is None else None,
                 time.time(), paused),
            )  # fmt: skip
        for call_id, run_id in CALLS.items():
            await store.execute(
                "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at,"
                " state) VALUES (?, ?, 'update_delivery_address', ?, ?, ?, 'pending')",
                (run_id, call_id, '{"order_id": "ORD-1042", "address": "12 Long Street"}',
                 now.isoformat(), (now + timedelta(minutes=5)).isoformat()),
            )  # fmt: skip
        await store.execute(
            "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at,"
            " state, outcome) VALUES ('9c0ffee00042', 'c3', 'scale_service', '{}', ?, ?,"
            " 'approved', 'outcome_unknown')",
            (now.isoformat(), now.isoformat()),
        )
    finally:
        await store.close()


def _printed(command: str, db: Path, width: int, capsys, monkeypatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(width))
    assert main([command, "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(len(line) for line in lines) <= width, "\n".join(lines)
    return lines


@WIDTHS
def test_runs_fits_the_terminal_with_every_id_and_time_whole(
    tmp_path, capsys, monkeypatch, width
) -> None:
    db = tmp_path / "s.db"
    asyncio.run(_store(db))
    lines = _printed("runs", db, width, capsys, monkeypatch)
    said = "\n".join(lines)
    header = next(line for line in lines if "run_id" in line)
    assert "state" in header, said
    for run_id in ("0022a4e57a64", "b1b47b3167ed", "9c0ffee00042"):
        found = [line for line in lines if run_id in line]
        assert len(found) == 1, said  # the id whole, on one line
        line = found[0]
        assert re.search(r"\d\d:\d\d:\d\d ", line), said  # its start, to the second
        assert "…" not in line, said  # nothing that names a run is cut
    assert "provider_failure" in said and "c3" in said, said  # the stop, the outcome unknown
    waiting = [line for line in lines if "awaiting_approval" in line or "paused " in line]
    assert len(waiting) == 2, said  # a paused run's state "paused" where it is narrow
    for run_id, env, script in RUNS:
        assert env in _named(lines, run_id) and script in _named(lines, run_id), said


# Each run of `_store`: its id, env and script.
RUNS = [
    ("0022a4e57a64", "order_support", "wrong-guess"),
    ("b1b47b3167ed", "service_outage", "solve"),
    ("9c0ffee00042", "service_outage", "wrong-guess"),
]


def _named(lines: list[str], run_id: str) -> str:
    """The lines of a run's row: its own, and those a folded cell adds under it (no id)."""
    at = next(i for i, line in enumerate(lines) if run_id in line)
    row = [lines[at]]
    for line in lines[at + 1 :]:
        if line[:14].strip() or not line.strip():
            break
        row.append(line)
    return "\n".join(row)


def test_runs_at_80_columns_says_each_runs_env_and_script_beside_a_waiting_one(
    tmp_path, capsys, monkeypatch
) -> None:
    """A run waiting for approval and one with an outcome unknown: the env and script of
    each are still there, folded onto a second line rather than dropped or cut (they were
    dropped while `outcome?` kept its room), the start today its time of day to the second."""
    db = tmp_path / "s.db"
    asyncio.run(_store(db))
    lines = _printed("runs", db, 80, capsys, monkeypatch)
    said = "\n".join(lines)
    assert "env/script" in said and "outcome?" in said, said
    assert "awaiting_approval" in said and "provider_failure" in said, said
    for run_id, env, script in RUNS:
        row = _named(lines, run_id)
        assert f"{env}/" in row and script in row and "…" not in row, said
        assert re.search(r"  \d\d:\d\d:\d\d  ", row), said


@WIDTHS
def test_pending_fits_the_terminal_with_every_id_and_expiry_whole(
    tmp_path, capsys, monkeypatch, width
) -> None:
    db = tmp_path / "s.db"
    asyncio.run(_store(db))
    lines = _printed("pending", db, width, capsys, monkeypatch)
    said = "\n".join(lines)
    for call_id, run_id in CALLS.items():
        found = [line for line in lines if call_id in line]
        assert len(found) == 1, said  # the call id whole, on one line
        line = found[0]
        assert run_id in line, said
        assert re.search(r"  \d\d:\d\d:\d\d", line), said  # its expiry, to the second
        assert "+00:00" not in line and "T" not in line.split()[-1], said  # local, as `runs`
        assert not re.search(r"\d{4}-\d\d-\d\d", line), said  # one form at every width
    assert "expires" in said and "expires_at" not in said, said
    if width == 100:  # room for the tool's name whole; the arguments cut short
        assert said.count("update_delivery_address") == 2 and '{"order_id"' in said, said


def test_pending_with_nothing_pending_says_so_in_words(tmp_path, capsys, monkeypatch) -> None:
    db = tmp_path / "s.db"
    asyncio.run(_store(db))
    asyncio.run(_decided_all(db))
    assert _printed("pending", db, 80, capsys, monkeypatch) == ["no writes waiting for approval"]
    assert main(["pending", "--db", str(db), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [item["outcome_unknown"] for item in listed] == [True]  # the rest: no writes


async def _decided_all(db: Path) -> None:
    store = await open_store(db)
    try:
        await store.execute("UPDATE approvals SET state = 'approved'")
    finally:
        await store.close()


def test_a_live_runs_write_in_flight_is_not_an_unknown_outcome(tmp_path, capsys) -> None:
    """An approved write of a live run with no outcome yet is running now: `runs` lists no
    outcome unknown for it (it did, for every write a worker was carrying out)."""
    db = tmp_path / "s.db"
    asyncio.run(_store(db))

    async def in_flight() -> tuple[dict[str, list[str]], list[str]]:
        store = await open_store(db)
        try:
            now = datetime.now(UTC).isoformat()
            for run_id in ("b1b47b3167ed", "9c0ffee00042"):  # live, then stopped
                await store.execute(
                    "INSERT INTO approvals (run_id, call_id, tool, args, requested_at,"
                    " expires_at, state) VALUES (?, 'c9', 'scale_service', '{}', ?, ?,"
                    " 'approved')",
                    (run_id, now, now),
                )
            live = await outcome_queries.outcome_unknown(store, "b1b47b3167ed")
            return await outcome_queries.outcomes_unknown(store), live
        finally:
            await store.close()

    unknown, live = asyncio.run(in_flight())
    assert unknown == {"9c0ffee00042": ["c3", "c9"]} and live == []
