"""Reading and deciding through the store: runs, pending approvals, commands, events."""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import UTC, datetime
from typing import Any

from loopdeck.core.events import RunStopped
from loopdeck.core.states import RunState, StopReason
from loopdeck.store.database import Store

HEARTBEAT_STALE_S = 5.0
LIVE_STATES = ("ready", "planning", "deciding", "awaiting_approval", "executing", "reviewing")
COMMANDS = ("cancel", "kill", "pause", "resume")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def mark_crashed_runners(store: Store) -> list[str]:
    """Runs whose runner died (stale heartbeat, or a dead pid on this host) become `crashed`."""
    crashed = []
    here = socket.gethostname()
    rows = await store.fetchall(
        f"SELECT run_id, pid, host, heartbeat_at FROM runs WHERE state IN {LIVE_STATES}"
    )
    now = time.time()
    for row in rows:
        dead_here = row["host"] == here and row["pid"] and not _pid_alive(row["pid"])
        stale = row["heartbeat_at"] is None or now - row["heartbeat_at"] > HEARTBEAT_STALE_S
        if not (dead_here or stale):
            continue
        detail = f"runner pid {row['pid']} on {row['host']} stopped without recording a stop"
        changed = await store.execute(
            "UPDATE runs SET state = 'stopped', stop_reason = 'crashed', detail = ?, ended_at = ?"
            f" WHERE run_id = ? AND state IN {LIVE_STATES}",
            (detail, datetime.now(UTC).isoformat(), row["run_id"]),
        )
        if changed:
            await _append_stop(store, row["run_id"], detail)
            await store.execute(
                "UPDATE approvals SET state = 'withdrawn' WHERE run_id = ? AND state = 'pending'",
                (row["run_id"],),
            )
            crashed.append(row["run_id"])
    return crashed


async def _append_stop(store: Store, run_id: str, detail: str) -> None:
    last = await store.fetchall("SELECT MAX(seq) AS seq FROM events WHERE run_id = ?", (run_id,))
    seq = (last[0]["seq"] or 0) + 1
    event = RunStopped(
        run_id=run_id,
        seq=seq,
        state=RunState.STOPPED,
        stop_reason=StopReason.CRASHED,
        detail=detail,
    )
    await store.execute(
        "INSERT OR IGNORE INTO events (run_id, seq, kind, at, body) VALUES (?, ?, ?, ?, ?)",
        (run_id, seq, event.kind, event.at.isoformat(), event.model_dump_json()),
    )


async def list_runs(store: Store) -> list[dict[str, Any]]:
    await mark_crashed_runners(store)
    rows = await store.fetchall(
        "SELECT run_id, env, script, model, state, stop_reason, started_at, ended_at, tokens,"
        " cost_usd FROM runs ORDER BY started_at"
    )
    listed = [dict(row) for row in rows]
    for run in listed:
        run["outcome_unknown"] = await outcome_unknown(store, run["run_id"])
    return listed


async def outcome_unknown(store: Store, run_id: str) -> list[str]:
    """Approved writes whose completion was never recorded: never re-executed automatically."""
    rows = await store.fetchall(
        "SELECT call_id FROM approvals WHERE run_id = ? AND state = 'approved' AND outcome IS NULL",
        (run_id,),
    )
    return [row["call_id"] for row in rows]


async def pending_approvals(store: Store, run_id: str | None = None) -> list[dict[str, Any]]:
    await mark_crashed_runners(store)
    sql = (
        "SELECT run_id, call_id, tool, args, requested_at, expires_at FROM approvals"
        " WHERE state = 'pending'"
    )
    params: tuple[Any, ...] = ()
    if run_id is not None:
        sql += " AND run_id = ?"
        params = (run_id,)
    rows = await store.fetchall(sql + " ORDER BY requested_at", params)
    return [{**dict(row), "args": json.loads(row["args"])} for row in rows]


async def decide(
    store: Store, run_id: str, call_id: str, *, approved: bool, by: str, reason: str = ""
) -> bool:
    """Exactly one decision wins: False if the call was already decided or is not pending."""
    changed = await store.execute(
        "UPDATE approvals SET state = ?, decided_by = ?, reason = ?, decided_at = ?"
        " WHERE run_id = ? AND call_id = ? AND state = 'pending'",
        ("approved" if approved else "rejected", by, reason, datetime.now(UTC).isoformat(),
         run_id, call_id),
    )  # fmt: skip
    return changed == 1


async def approval_state(store: Store, run_id: str, call_id: str) -> dict[str, Any] | None:
    rows = await store.fetchall(
        "SELECT state, decided_by, reason FROM approvals WHERE run_id = ? AND call_id = ?",
        (run_id, call_id),
    )
    return dict(rows[0]) if rows else None


async def send_command(store: Store, run_id: str, command: str, by: str) -> None:
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}")
    await store.execute(
        "INSERT INTO commands (run_id, command, by, created_at) VALUES (?, ?, ?, ?)",
        (run_id, command, by, time.time()),
    )


async def take_commands(store: Store, run_id: str) -> list[dict[str, Any]]:
    rows = await store.fetchall(
        "SELECT id, command, by FROM commands WHERE run_id = ? AND consumed_at IS NULL ORDER BY id",
        (run_id,),
    )
    for row in rows:
        await store.execute(
            "UPDATE commands SET consumed_at = ? WHERE id = ?", (time.time(), row["id"])
        )
    return [dict(row) for row in rows]


async def run_row(store: Store, run_id: str) -> dict[str, Any] | None:
    rows = await store.fetchall("SELECT * FROM runs WHERE run_id = ?", (run_id,))
    return dict(rows[0]) if rows else None


async def events_after(
    store: Store, run_id: str, seq: int, limit: int = 5000
) -> list[dict[str, Any]]:
    rows = await store.fetchall(
        "SELECT seq, kind, body FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (run_id, seq, limit),
    )
    return [dict(row) for row in rows]


async def heartbeat(store: Store, run_id: str) -> None:
    await store.execute("UPDATE runs SET heartbeat_at = ? WHERE run_id = ?", (time.time(), run_id))
