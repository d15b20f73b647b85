"""Reading and resolving writes whose outcome is unknown, and reading a run's grants.

An unknown outcome is resolved once (one winner, in the store's transaction): the approval's
`outcome` becomes `executed` (applied) or `failed` (not applied). A live run hears of it
through its commands (`resolve`), and records `OutcomeResolved` itself; a run that ended has
the event written here, as a reader writes a crashed run's stop.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from loopdeck.store import queries
from loopdeck.store.base import RESTORED, Store, Tx
from loopdeck.store.chain import READER_INSERT, reader_row
from loopdeck.store.queries import LIVE_STATES, QUESTION, RESOLVE, UNKNOWN_OUTCOMES, send_command

if TYPE_CHECKING:  # the runtime's events (pydantic): imported where an event is made or read
    from loopdeck.core.events import EventBase

_UNKNOWN = f"outcome IN {UNKNOWN_OUTCOMES}"
# An approved write whose outcome is unknown, as `loopdeck runs` lists it (`outcome_unknown`):
# ended unknown or cut short, or never recorded as ended in a run that is no longer live (in
# a live run it is running now).
_OUTCOME_UNKNOWN = (
    f"a.state = 'approved' AND (a.outcome IN {UNKNOWN_OUTCOMES} OR (a.outcome IS NULL AND"
    f" NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = a.run_id AND r.state IN {LIVE_STATES})))"
)


async def outcomes_unknown(store: Store) -> dict[str, list[str]]:
    """`outcome_unknown` of every run that has any, in one read: run id -> call ids."""
    rows = await store.fetchall(
        f"SELECT a.run_id, a.call_id FROM approvals a WHERE {_OUTCOME_UNKNOWN}"
        " ORDER BY a.run_id, a.call_id"
    )
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(row["run_id"], []).append(row["call_id"])
    return found


async def outcome_unknown(store: Store, run_id: str) -> list[str]:
    """Approved writes whose completion was never recorded (the run no longer live), or that
    ended with their outcome unknown (a timeout, a crash mid-write): never re-executed
    automatically."""
    rows = await store.fetchall(
        f"SELECT a.call_id FROM approvals a WHERE a.run_id = ? AND {_OUTCOME_UNKNOWN}"
        " ORDER BY a.call_id",
        (run_id,),
    )
    return [row["call_id"] for row in rows]


async def unknown_outcomes(store: Store, run_id: str | None = None) -> list[Any]:
    """Approved writes whose outcome nobody knows: ended unknown or cut short, or, in a run
    that is no longer live, never recorded as ended. Oldest first; each row (read by name)
    with its run, call, tool, arguments (JSON text), when it was approved, its outcome and
    its run's state (`operator/entries.py` makes them the inbox's entries)."""
    sql = (
        "SELECT a.run_id, a.call_id, a.tool, a.args, a.decided_at, a.outcome, r.state"
        " FROM approvals a JOIN runs r ON r.run_id = a.run_id"
        f" WHERE a.state = 'approved' AND a.tool != '{QUESTION}' AND (a.{_UNKNOWN}"
        f" OR (a.outcome IS NULL AND r.state NOT IN {LIVE_STATES}))"
    )
    params: tuple[Any, ...] = ()
    if run_id is not None:
        sql += " AND a.run_id = ?"
        params = (run_id,)
    return await store.fetchall(sql + " ORDER BY a.decided_at", params)


async def resolve(tx: Tx, run_id: str, call_id: str, *, applied: bool, by: str) -> str | None:
    """The operator's word on one unknown outcome: None when it won, else why not."""
    runs = await tx.fetchall("SELECT state FROM runs WHERE run_id = ?", (run_id,))
    live = bool(runs) and runs[0]["state"] in LIVE_STATES
    # A live run's write with no outcome yet is running now: only its runner can say.
    unknown = _UNKNOWN if live else f"({_UNKNOWN} OR outcome IS NULL)"
    rows = await tx.fetchall(
        "SELECT tool, outcome FROM approvals WHERE run_id = ? AND call_id = ? AND state ="
        f" 'approved' AND tool != '{QUESTION}'",
        (run_id, call_id),
    )
    if not rows:
        return f"{call_id} is not an approved write of run {run_id}"
    outcome = "executed" if applied else "failed"
    changed = await tx.execute(
        f"UPDATE approvals SET outcome = ? WHERE run_id = ? AND call_id = ? AND {unknown}",
        (outcome, run_id, call_id),
    )
    if changed != 1:
        if rows[0]["outcome"] is None and (lapsed := await _lapsed_lease(tx, run_id)):
            return (
                f"{call_id}'s outcome is not known yet: {lapsed}; the worker that takes the"
                " run up records it outcome_unknown, and `resolve` takes your word then"
            )
        if rows[0]["outcome"] == RESTORED:
            return await _settled_by_fork(tx, run_id, call_id)
        known = rows[0]["outcome"] or "running"
        return f"{call_id}'s outcome is not unknown: it is {known}"
    said = {"call_id": call_id, "applied": applied}
    if live:
        await send_command(tx, run_id, RESOLVE, by, said)
        return None
    from loopdeck.core.events import OutcomeResolved

    event, row = await reader_row(
        tx, OutcomeResolved, run_id, call_id=call_id, tool=rows[0]["tool"], applied=applied, by=by
    )
    await tx.execute(READER_INSERT, row)
    await tx.execute("UPDATE runs SET last_seq = ? WHERE run_id = ?", (event.seq, run_id))
    return None


async def _settled_by_fork(tx: Tx, run_id: str, call_id: str) -> str:
    """Why a fork's write its restored state settled takes no word (`RunForked.settled`)."""
    from loopdeck.core.replay_events import RunForked

    rows = await tx.fetchall(
        "SELECT body FROM events WHERE run_id = ? AND kind = 'run_forked'", (run_id,)
    )
    source = RunForked.model_validate_json(rows[0]["body"]).source if rows else "its source"
    return (
        f"{call_id} ran in run {source} before this fork, its outcome unknown there; run"
        f" {run_id}'s env was restored to the state {source} saw after it, so its outcome here"
        f" is that state's: say what became of it in {source} (loopdeck resolve {source}"
        f" {call_id})"
    )


async def grant_events(store: Store, run_id: str | None = None) -> list[EventBase]:
    """The events that make runs' grants (given, used, revoked), each run's in order."""
    from loopdeck.core.events import ApprovalDecided, GrantGiven, GrantRevoked, kind_of

    classes = {kind_of(cls): cls for cls in (GrantGiven, GrantRevoked, ApprovalDecided)}
    kinds = tuple(classes)
    # An approval counts only when a grant gave it (its body names the grant).
    sql = (
        f"SELECT body FROM events WHERE kind IN {kinds}"
        f" AND (kind != '{kind_of(ApprovalDecided)}' OR body LIKE '%\"grant_id\":\"%')"
    )
    params: tuple[Any, ...] = ()
    if run_id is not None:
        sql += " AND run_id = ?"
        params = (run_id,)
    rows = await store.fetchall(sql + " ORDER BY run_id, seq", params)
    made: list[EventBase] = []
    for row in rows:
        body = json.loads(row["body"])
        made.append(classes[body["kind"]].model_validate(body))
    return made


async def _lapsed_lease(tx: Tx, run_id: str) -> str | None:
    """A live run's lease that nobody renews (its worker gone, none has taken it up yet):
    said as the runs listing says it; None when its worker holds it."""
    rows = await tx.fetchall(
        "SELECT run_id, state, host, note, expires_at, unmovable FROM leases WHERE run_id = ?",
        (run_id,),
    )
    if not rows:
        return None
    row = queries.lapsed(rows[0], time.time())
    return str(row["note"]) if isinstance(row, dict) and row.get("lapsed") else None
