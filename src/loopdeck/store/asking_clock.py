"""The one clock a write's asking expires on: the store's.

A run records its asking with its own host's times (`requested_at`, `expires_at`); decisions
come from any host. On PostgreSQL (runs and deciders on many hosts) the row's expiry is put on
the server's clock as the asking is written: the asking's own length (its recorded
`expires_at - requested_at`) from the server's now. Each decision, and a worker going on with
a run, judge it against the server's clock again, so no host's clock is compared with
another's (a decider ten minutes ahead was refused an asking with minutes left; one behind
decided an asking its run had given up). A SQLite store is one host's file: that host's clock
is the store's. `requested_at` stays as the run wrote it: it names the asking.
"""

from __future__ import annotations

from datetime import UTC, datetime

from loopdeck.store.base import Store

POSTGRESQL = "postgresql"
# The server's now, and a time as Python's `isoformat` writes it (UTC, microseconds).
PG_NOW = "clock_timestamp()"
PG_ISO = 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'


def asked_expiry(backend: str, requested_at: str, expires_at: str) -> tuple[str, tuple[str, ...]]:
    """The SQL of the expiry written with an asking's row, and its parameters."""
    if backend != POSTGRESQL:
        return "?", (expires_at,)
    length = "(CAST(? AS timestamptz) - CAST(? AS timestamptz))"
    return f"to_char(({PG_NOW} + {length}) AT TIME ZONE 'UTC', '{PG_ISO}')", (
        expires_at,
        requested_at,
    )


def still_open(backend: str) -> tuple[str, tuple[str, ...]]:
    """SQL true while an asking's row (`expires_at`) has not expired, and its parameters."""
    if backend != POSTGRESQL:
        return "expires_at > ?", (datetime.now(UTC).isoformat(),)
    return f"CAST(expires_at AS timestamptz) > {PG_NOW}", ()


async def expired_unanswered(store: Store, run_id: str, call_id: str) -> bool:
    """Whether the call's asking is still pending past its expiry, on the store's clock."""
    is_open, params = still_open(store.backend)
    rows = await store.fetchall(
        f"SELECT {is_open} AS unexpired FROM approvals WHERE run_id = ? AND call_id = ?"
        " AND state = 'pending' AND expires_at IS NOT NULL",
        (*params, run_id, call_id),
    )
    return bool(rows) and not rows[0]["unexpired"]


async def store_now(store: Store) -> datetime:
    """The store's clock now (the server's on PostgreSQL): what a listing says has expired
    is what a decision would find expired."""
    if store.backend != POSTGRESQL:
        return datetime.now(UTC)
    rows = await store.fetchall(f"SELECT to_char({PG_NOW} AT TIME ZONE 'UTC', '{PG_ISO}') AS now")
    return datetime.fromisoformat(str(rows[0]["now"]))
