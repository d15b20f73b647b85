"""The fleet's change feed: what a console shows of each run, kept on the run's row, and the
row's change number (`changed`), so that following a store of a thousand runs reads the runs
that changed, never all of them.

Who keeps what:
- the run's writer (`store/event_rows.py`), once per batch, in the batch's transaction: its
  last event number, last budget usage, last review finding, paused, guard repeats, state;
- triggers, whoever writes: the pending count and the soonest expiry whenever an approval row
  is added or its state moves (a decision from any process, a crash mark, a withdrawal), and
  `changed` whenever a column the fleet shows is written (never for a heartbeat).

Where a run is (`store/leases.py`: queued, held by a worker on a host, parked, ended, and its
last move in words) is fed the same way from the `leases` row, which has a `changed` of its
own (schema v7), moved by a trigger whenever a column the fleet shows is written (never by a
lease's renewal, which writes only its expiry); `placements_changed` reads the leases that
changed since a cursor of their own. A queued run has no runs row until a worker starts it,
so its lease is the only place the fleet learns of it.

The change number differs by engine. SQLite commits one writer at a time, so the next number
(the highest plus one) is given in commit order and a reader's cursor is the highest it read,
plus one. PostgreSQL commits concurrently: a number taken from a sequence could commit after a
higher one a reader already passed. There the number is the writing transaction's id, and a
reader's cursor is the oldest transaction still running when it read (its snapshot's xmin):
everything older has landed and was seen; anything newer is read again next time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loopdeck.store.base import Store, Tx

if TYPE_CHECKING:  # the runtime's events (pydantic): read only by the v4 migration
    from loopdeck.core.events import OperatorCommand, ReviewVerdict

# The runs columns a fleet shows: writing one of them moves the row's `changed`.
SHOWN = (
    "env, script, model, state, stop_reason, started_at, pid, host, last_seq, usage,"
    " last_finding, paused, guard_repeats, pending, soonest_expiry"
)
# What a follower reads of a changed run.
FEED_COLUMNS = (
    "run_id", "env", "script", "model", "state", "stop_reason", "started_at", "pid", "host",
    "last_seq", "usage", "last_finding", "paused", "guard_repeats", "pending",
    "soonest_expiry", "changed",
)  # fmt: skip

# The leases columns a fleet shows (a renewal writes none of them), and what it reads.
PLACEMENT_SHOWN = "state, host, note, moved_at"
PLACEMENT_COLUMNS = ("run_id", "state", "host", "note", "moved_at", "submitted_at", "options",
                     "changed")  # fmt: skip

_PENDING = (
    "pending = (SELECT COUNT(*) FROM approvals a WHERE a.run_id = {run} AND a.state = 'pending'),"
    " soonest_expiry = (SELECT MIN(a.expires_at) FROM approvals a WHERE a.run_id = {run}"
    " AND a.state = 'pending')"
)
_SQLITE_NEXT = "(SELECT COALESCE(MAX(changed), 0) + 1 FROM runs)"
_SQLITE_NEXT_LEASE = "(SELECT COALESCE(MAX(changed), 0) + 1 FROM leases)"

# Each one statement (a trigger's body has semicolons of its own).
SQLITE_FEED = (
    "CREATE INDEX IF NOT EXISTS runs_changed ON runs (changed)",
    "CREATE TRIGGER IF NOT EXISTS runs_feed_insert AFTER INSERT ON runs BEGIN"
    f" UPDATE runs SET changed = {_SQLITE_NEXT} WHERE run_id = NEW.run_id; END",
    f"CREATE TRIGGER IF NOT EXISTS runs_feed_update AFTER UPDATE OF {SHOWN} ON runs BEGIN"
    f" UPDATE runs SET changed = {_SQLITE_NEXT} WHERE run_id = NEW.run_id; END",
    "CREATE TRIGGER IF NOT EXISTS approvals_feed_insert AFTER INSERT ON approvals BEGIN"
    f" UPDATE runs SET {_PENDING.format(run='NEW.run_id')} WHERE run_id = NEW.run_id; END",
    "CREATE TRIGGER IF NOT EXISTS approvals_feed_update AFTER UPDATE OF state, expires_at"
    f" ON approvals BEGIN UPDATE runs SET {_PENDING.format(run='NEW.run_id')}"
    " WHERE run_id = NEW.run_id; END",
    "CREATE INDEX IF NOT EXISTS leases_changed ON leases (changed)",
    "CREATE TRIGGER IF NOT EXISTS leases_feed_insert AFTER INSERT ON leases BEGIN"
    f" UPDATE leases SET changed = {_SQLITE_NEXT_LEASE} WHERE run_id = NEW.run_id; END",
    f"CREATE TRIGGER IF NOT EXISTS leases_feed_update AFTER UPDATE OF {PLACEMENT_SHOWN}"
    f" ON leases BEGIN UPDATE leases SET changed = {_SQLITE_NEXT_LEASE}"
    " WHERE run_id = NEW.run_id; END",
    # A store from before v7: its leases read on a follower's first read.
    "UPDATE leases SET changed = 0 WHERE changed IS NULL",
)

POSTGRES_FEED = f"""
CREATE INDEX IF NOT EXISTS runs_changed ON runs (changed);
CREATE OR REPLACE FUNCTION loopdeck_run_changed() RETURNS trigger AS $$
BEGIN NEW.changed := pg_current_xact_id()::text::bigint; RETURN NEW; END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER loopdeck_run_changed BEFORE INSERT OR UPDATE OF {SHOWN} ON runs
    FOR EACH ROW EXECUTE FUNCTION loopdeck_run_changed();
CREATE OR REPLACE FUNCTION loopdeck_pending() RETURNS trigger AS $$
BEGIN UPDATE runs SET {_PENDING.format(run="NEW.run_id")} WHERE run_id = NEW.run_id;
RETURN NULL; END $$ LANGUAGE plpgsql;
CREATE OR REPLACE TRIGGER loopdeck_pending AFTER INSERT OR UPDATE OF state, expires_at
    ON approvals FOR EACH ROW EXECUTE FUNCTION loopdeck_pending();
CREATE INDEX IF NOT EXISTS leases_changed ON leases (changed);
CREATE OR REPLACE TRIGGER loopdeck_lease_changed BEFORE INSERT OR UPDATE OF {PLACEMENT_SHOWN}
    ON leases FOR EACH ROW EXECUTE FUNCTION loopdeck_run_changed();
UPDATE leases SET changed = pg_current_xact_id()::text::bigint WHERE changed IS NULL;
"""

# A follower's cursor in PostgreSQL: the oldest transaction running when its read began.
POSTGRES_HORIZON = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS horizon"


@dataclass
class Changes:
    """What one read of the feed found: the runs rows and the leases rows that changed, and
    the cursors of the next read."""

    runs: list[dict[str, Any]]
    runs_after: int
    placements: list[dict[str, Any]]
    placements_after: int


async def changes(store: Store, runs_since: int, placements_since: int) -> Changes:
    """The runs and the leases whose row changed at or after their cursors (0: every one),
    and the next cursors. PostgreSQL: one statement, one round trip, one snapshot (both
    cursors the oldest transaction running as it began); SQLite: the two reads."""
    if store.backend == "postgresql":
        rows = await store.fetchall(
            f"SELECT h.horizon, (SELECT json_agg(r) FROM (SELECT {', '.join(FEED_COLUMNS)}"
            " FROM runs WHERE changed >= ?) r) AS runs, (SELECT json_agg(l) FROM (SELECT"
            f" {', '.join(PLACEMENT_COLUMNS)} FROM leases WHERE changed >= ?) l) AS placements"
            f" FROM ({POSTGRES_HORIZON}) h",
            (runs_since, placements_since),
        )
        horizon = int(rows[0]["horizon"])
        return Changes(rows[0]["runs"] or [], horizon, rows[0]["placements"] or [], horizon)
    runs, runs_after = await store.runs_changed(FEED_COLUMNS, runs_since)
    placements, after = await placements_changed(store, placements_since)
    return Changes(
        [{c: row[c] for c in FEED_COLUMNS} for row in runs], runs_after, placements, after
    )


async def placements_changed(store: Store, since: int) -> tuple[list[dict[str, Any]], int]:
    """The leases whose row changed at or after the cursor `since` (0: every one), and the
    next cursor: as `Store.runs_changed` for the runs, on each engine."""
    if store.backend == "postgresql":
        chosen = ", ".join(f"l.{column}" for column in PLACEMENT_COLUMNS)
        rows = await store.fetchall(
            f"SELECT h.horizon, {chosen} FROM ({POSTGRES_HORIZON}) h"
            " LEFT JOIN leases l ON l.changed >= ?",
            (since,),
        )
        after = int(rows[0]["horizon"])
        rows = [row for row in rows if row["run_id"] is not None]
    else:
        rows = await store.fetchall(
            f"SELECT {', '.join(PLACEMENT_COLUMNS)} FROM leases WHERE changed >= ?", (since,)
        )
        after = max((int(row["changed"]) + 1 for row in rows), default=since)
    return [{column: row[column] for column in PLACEMENT_COLUMNS} for row in rows], after


def finding(verdict: ReviewVerdict) -> str:
    """A review's finding as the fleet shows it: its first reason, else its verdict."""
    return verdict.reasons[0] if verdict.reasons else verdict.verdict


def pause_word(command: OperatorCommand) -> int | None:
    """1 after a pause, 0 after a resume; None for the commands that say nothing of it."""
    if command.command in ("pause", "resume"):
        return int(command.command == "pause")
    return None


async def fill_summaries(tx: Tx) -> None:
    """A store from before v4: each run's summary read once from its events (the migration's
    transaction); every row's `changed` is set on the way."""
    from loopdeck.core.events import GuardTripped, OperatorCommand, ReviewVerdict, kind_of

    for (run_id,) in [tuple(row) for row in await tx.fetchall("SELECT run_id FROM runs")]:
        fields: dict[str, Any] = {"last_seq": 0, "guard_repeats": 0, "paused": 0}
        rows = await tx.fetchall("SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,))
        fields["last_seq"] = int(rows[0][0] or 0)
        budget = await _last_body(tx, run_id, "budget_updated")
        if budget is not None:
            fields["usage"] = json.dumps(json.loads(budget)["usage"])
        verdict = await _last_body(tx, run_id, kind_of(ReviewVerdict))
        if verdict is not None:
            fields["last_finding"] = finding(ReviewVerdict.model_validate_json(verdict))
        commands = await tx.fetchall(
            "SELECT body FROM events WHERE run_id = ? AND kind = ? ORDER BY seq DESC",
            (run_id, kind_of(OperatorCommand)),
        )
        for (body,) in commands:
            paused = pause_word(OperatorCommand.model_validate_json(body))
            if paused is not None:
                fields["paused"] = paused
                break
        rows = await tx.fetchall(
            "SELECT COUNT(*) FROM events WHERE run_id = ? AND kind = ?",
            (run_id, kind_of(GuardTripped)),
        )
        fields["guard_repeats"] = int(rows[0][0])
        assigned = ", ".join(f"{column} = ?" for column in fields)
        await tx.execute(
            f"UPDATE runs SET {assigned}, {_PENDING.format(run='?')} WHERE run_id = ?",
            (*fields.values(), run_id, run_id, run_id),
        )


async def _last_body(tx: Tx, run_id: str, kind: str) -> str | None:
    rows = await tx.fetchall(
        "SELECT body FROM events WHERE run_id = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
        (run_id, kind),
    )
    return str(rows[0][0]) if rows else None
