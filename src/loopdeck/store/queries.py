"""Reading and deciding through the store: runs, pending approvals, commands, events.

Reading never writes: a listing shows a run whose runner died as the store has it (live)
until someone marks it. `mark_crashed_runners` is the one function that does, each run in its
own transaction, called explicitly by the followers that look for dead runners (the fleet,
an attached console, `loopdeck runs` and `pending`, a console's check before it opens).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from loopdeck.core.states import TERMINAL_STATES, RunState, StopReason
from loopdeck.core.text import escape_surrogates, json_text
from loopdeck.store.asking_clock import still_open
from loopdeck.store.base import UNTAKEN, Store, StoreUnavailable, Tx
from loopdeck.store.chain import READER_INSERT, reader_row
from loopdeck.store.feed import FEED_COLUMNS
from loopdeck.store.leases import HELD, after_lapse
from loopdeck.store.leases import LIVE as PLACED
from loopdeck.store.liveness import crash_silence_s, runner_gone, this_host

if TYPE_CHECKING:  # the runtime's events (pydantic): imported where an event is made or read
    from loopdeck.core.events import EventBase

# Every state but the terminal ones, from the state machine itself: a run waiting for the
# operator's answer is live (it was missing here: such a run showed as stopped in the fleet,
# and a crashed runner's run in that state was never marked crashed).
LIVE_STATES = tuple(state.value for state in RunState if state not in TERMINAL_STATES)
COMMANDS = ("cancel", "kill", "pause", "resume")
# A command with words of its own travels as its word and a JSON value in the `command`
# column (controls and NUL escaped: PostgreSQL's text takes no NUL); an older runner ignores
# it. A message to the agent: its text; revoke: {"grant_id"}; resolve: {"call_id", "applied"}.
MESSAGE = "message"
REVOKE = "revoke"
RESOLVE = "resolve"
# An unknown outcome, as the approvals table has it: a write approved whose end was never
# recorded (its runner died), or that ended unknown or was cut short.
UNKNOWN_OUTCOMES = ("outcome_unknown", "interrupted")
# Who withdrew an approval when its run was marked crashed: the runner undoes it if alive.
CRASH_DETECTOR = "crash-detector"
# A question (`ask_user`) waits in the approvals table as tool 'ask_user'; it never expires.
QUESTION = "ask_user"
QUESTION_NEVER_EXPIRES = "9999-12-31T23:59:59+00:00"


async def mark_crashed_runners(store: Store, silence_s: float | None = None) -> list[str]:
    """Runs whose runner is known to be gone become `crashed`, with one `run_stopped` event;
    the ones marked by this call. A store that cannot take the write leaves the rest to the
    next call."""
    silence = crash_silence_s() if silence_s is None else silence_s
    here, now = this_host(), time.time()
    # Only the runs that may be gone: this host's (their pid is looked at) and the silent.
    # A run a worker holds or will (`store/leases.py`) is never marked: a worker gone is
    # replaced by another, which goes on with the run.
    rows = await store.fetchall(
        "SELECT run_id, pid, host, heartbeat_at, pid_started FROM runs"
        f" WHERE state IN {LIVE_STATES}"
        " AND (host = ? OR heartbeat_at IS NULL OR heartbeat_at < ?)"
        f" AND run_id NOT IN (SELECT run_id FROM leases WHERE state IN {PLACED})",
        (here, now - silence),
    )
    crashed: list[str] = []
    for row in rows:
        why = runner_gone(row, here=here, now=now, silence_s=silence)
        if why is None:
            continue
        try:
            marked = await mark_crashed(store, row["run_id"], why)
        except StoreUnavailable:
            # A full disk or a held lock: a read never depends on a write; the next reader
            # marks it.
            return crashed
        if marked:
            crashed.append(row["run_id"])
    return crashed


async def mark_crashed(store: Store, run_id: str, why: str) -> bool:
    """The row, the stop event and the withdrawals land together or not at all; the event
    is chained after the run's last (`store/chain.py`)."""
    detail = f"{why}; it stopped without recording a stop"
    from loopdeck.core.events import RunStopped

    async with store.transaction(run_id) as tx:
        event, row = await reader_row(
            tx, RunStopped, run_id, state=RunState.STOPPED, stop_reason=StopReason.CRASHED,
            detail=detail,
        )  # fmt: skip
        changed = await tx.execute(
            "UPDATE runs SET state = 'stopped', stop_reason = 'crashed', detail = ?, ended_at = ?,"
            f" last_seq = ? WHERE run_id = ? AND state IN {LIVE_STATES}",
            (detail, datetime.now(UTC).isoformat(), event.seq, run_id),
        )
        if changed != 1:
            return False  # another reader, or the runner's own stop, came first
        await tx.execute(READER_INSERT, row)
        await tx.execute(
            "UPDATE approvals SET state = 'withdrawn', decided_by = ?"
            " WHERE run_id = ? AND state = 'pending'",
            (CRASH_DETECTOR, run_id),
        )
    return True


def local_time(stamp: str | None) -> str:
    """A stored UTC timestamp as the reader's local time, to the second."""
    if not stamp:
        return "-"
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return stamp


async def list_runs(store: Store) -> list[Any]:
    """Every run's row as `loopdeck runs` lists it, newest first (read by name)."""
    return await store.fetchall(
        "SELECT run_id, env, script, model, state, stop_reason, started_at, ended_at, tokens,"
        " cost_usd, host, pid, paused FROM runs ORDER BY started_at DESC"
    )


async def placements(store: Store, run_id: str | None = None) -> list[Any]:
    """The runs a worker holds or will (`store/leases.py`: queued, held, parked), each row
    with its state, the host that holds or last held it, its last move (`note`), its
    submitted options and when it was submitted. Read here, never written. A held lease
    its worker stopped renewing (killed, cut off) is said so in its `note`: the run is
    never marked crashed (`mark_crashed_runners`), it waits for a worker to take it up."""
    sql = (
        "SELECT run_id, state, host, note, options, submitted_at, expires_at, unmovable"
        " FROM leases"
        f" WHERE state IN {PLACED}"
    )
    if run_id is None:
        rows = await store.fetchall(sql)
    else:
        rows = await store.fetchall(sql + " AND run_id = ?", (run_id,))
    now = time.time()
    return [lapsed(row, now) for row in rows]


def lapsed(row: Any, now: float) -> Any:
    """A held lease past its expiry, its note saying so (`lapsed`: true), and whether the run
    can go on (`leases.stranded`); any other row as it is."""
    expires = row["expires_at"]
    if row["state"] != HELD or expires is None or float(expires) >= now:
        return row
    ago = max(1, int(now - float(expires)))
    held, then = (f" by {row['host']}" if row["host"] else ""), after_lapse(row, now)
    note = f"its lease{held} expired {ago} s ago (its worker stopped renewing it): {then}"
    return {**dict(row), "note": note, "lapsed": True}


async def pending_approvals(store: Store, run_id: str | None = None) -> list[dict[str, Any]]:
    sql = (
        "SELECT run_id, call_id, tool, args, requested_at, expires_at FROM approvals"
        f" WHERE state = 'pending' AND tool != '{QUESTION}'"
    )
    params: tuple[Any, ...] = ()
    if run_id is not None:
        sql += " AND run_id = ?"
        params = (run_id,)
    rows = await store.fetchall(sql + " ORDER BY requested_at", params)
    return [{**dict(row), "args": json.loads(row["args"])} for row in rows]


async def decide(
    store: Store | Tx,
    run_id: str,
    call_id: str,
    *,
    approved: bool,
    by: str,
    reason: str = "",
    args: dict[str, Any] | None = None,
    grant: dict[str, Any] | None = None,
    asked_at: str | None = None,
    backend: str = "",
) -> bool:
    """Exactly one decision wins: False if the call was decided, is not pending or expired
    (checked in the update, on the store's clock: `store/asking_clock.py`; `backend`, the
    store's). The bare update: see `store/deciding.py`. `args`: the edit; `grant`: a grant
    rule (JSON); `asked_at`: the asking decided (requested_at), no later."""
    unexpired, clock = still_open(backend)
    changed = await store.execute(
        "UPDATE approvals SET state = ?, decided_by = ?, reason = ?, decided_at = ?,"
        f" edited_args = ?, grant_rule = ?, {UNTAKEN} = 1 WHERE run_id = ? AND call_id = ?"
        f" AND state = 'pending' AND tool != '{QUESTION}' AND {unexpired}"
        " AND requested_at = COALESCE(?, requested_at)",
        ("approved" if approved else "rejected", by, reason, datetime.now(UTC).isoformat(),
         _json_or_none(args), _json_or_none(grant), run_id, call_id, *clock, asked_at),
    )  # fmt: skip
    return changed == 1


def _json_or_none(value: Any) -> str | None:
    return None if value is None else escape_surrogates(json_text(value))


async def pending_questions(store: Store, run_id: str | None = None) -> list[dict[str, Any]]:
    """Questions the run asked that wait for the operator's answer, each with the answers it
    offers (`choices`, from its `question_asked` event; empty: it takes any words)."""
    sql = (
        "SELECT run_id, call_id, args, requested_at FROM approvals"
        f" WHERE state = 'pending' AND tool = '{QUESTION}'"
    )
    params: tuple[Any, ...] = ()
    if run_id is not None:
        sql += " AND run_id = ?"
        params = (run_id,)
    rows = await store.fetchall(sql + " ORDER BY requested_at", params)
    questions = []
    for row in rows:
        asked = await question_asked(store, row["run_id"], row["call_id"]) or {}
        questions.append(
            {"run_id": row["run_id"], "question_id": row["call_id"],
             "question": json.loads(row["args"])["question"], "asked_at": row["requested_at"],
             "choices": list(asked.get("choices") or [])}
        )  # fmt: skip
    return questions


async def answer(
    store: Store | Tx, run_id: str, text: str, by: str, *, question_id: str | None = None
) -> bool:
    """The run's waiting question (or the one named) gets this answer; one answer wins."""
    sql = (
        "UPDATE approvals SET state = 'answered', decided_by = ?, reason = ?, decided_at = ?"
        f" WHERE run_id = ? AND state = 'pending' AND tool = '{QUESTION}'"
    )
    params: tuple[Any, ...] = (by, text, datetime.now(UTC).isoformat(), run_id)
    if question_id is not None:
        sql += " AND call_id = ?"
        params += (question_id,)
    return await store.execute(sql, params) >= 1


async def approval_state(store: Store, run_id: str, call_id: str) -> dict[str, Any] | None:
    """The call's row: state, decided_by, reason, the decision's edit and grant (JSON text or
    None), when its request was asked (which asking it is), when it expires, `untaken`."""
    rows = await store.fetchall(
        "SELECT state, decided_by, reason, edited_args, grant_rule, tool, outcome, expires_at,"
        f" requested_at, {UNTAKEN} FROM approvals WHERE run_id = ? AND call_id = ?",
        (run_id, call_id),
    )
    return dict(rows[0]) if rows else None


async def is_question(store: Store, run_id: str, call_id: str) -> bool:
    """Whether the run's request `call_id` is a question (answered, never approved)."""
    rows = await store.fetchall(
        f"SELECT 1 FROM approvals WHERE run_id = ? AND call_id = ? AND tool = '{QUESTION}'",
        (run_id, call_id),
    )
    return bool(rows)


async def send_command(
    store: Store | Tx, run_id: str, command: str, by: str, said: Any = None
) -> None:
    """`cancel`, `kill`, `pause`, `resume`; or `message`, `revoke`, `resolve` with what they
    say (`said`, JSON data)."""
    if said is None and command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}")
    if said is not None:
        command = f"{command} {escape_surrogates(json_text(said))}"
    await store.execute(
        'INSERT INTO commands (run_id, command, "by", created_at) VALUES (?, ?, ?, ?)',
        (run_id, command, by, time.time()),
    )


async def send_message(store: Store | Tx, run_id: str, text: str, by: str) -> None:
    """The operator's message to the run's agent, read by its runner with the commands."""
    await send_command(store, run_id, MESSAGE, by, text)


async def take_commands(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's commands not taken yet, in order, each marked taken; a command with words
    has them as `said` (a message's text as `text` too)."""
    return await take_commands_of(store, [run_id])


async def take_commands_of(store: Store, run_ids: list[str]) -> list[dict[str, Any]]:
    """`take_commands` for many runs at once (a worker's): one read, one mark, each command
    with its `run_id`. A pause or resume taken sets the run's `paused` in the mark's own
    transaction (its runner does it now): `pause_or_resume` never judges from a row that
    lags the taking by the commit of its `operator_command` event."""
    if not run_ids:
        return []
    marks = ", ".join("?" for _ in run_ids)
    rows = await store.fetchall(
        'SELECT id, run_id, command, "by" FROM commands WHERE consumed_at IS NULL'
        f" AND run_id IN ({marks}) ORDER BY id",
        tuple(run_ids),
    )
    if rows:
        paused = {row["run_id"]: int(row["command"] == "pause") for row in rows
                  if row["command"] in ("pause", "resume")}  # fmt: skip
        taken = ", ".join("?" for _ in rows)
        async with store.transaction() as tx:
            await tx.execute(
                f"UPDATE commands SET consumed_at = ? WHERE id IN ({taken})",
                (time.time(), *(row["id"] for row in rows)),
            )
            for run_id, now_paused in paused.items():
                await tx.execute(
                    "UPDATE runs SET paused = ? WHERE run_id = ?", (now_paused, run_id)
                )
    return [_command(dict(row)) for row in rows]


def _command(row: dict[str, Any]) -> dict[str, Any]:
    word, _, text = str(row["command"]).partition(" ")
    if text:
        said = json.loads(text)
        row.update(command=word, said=said)
        if word == MESSAGE:
            row["text"] = said
    return row


async def run_row(store: Store, run_id: str) -> dict[str, Any] | None:
    rows = await store.fetchall("SELECT * FROM runs WHERE run_id = ?", (run_id,))
    return dict(rows[0]) if rows else None


async def events_after(store: Store, run_id: str, seq: int, limit: int = 5000) -> list[Any]:
    """The run's stored events after `seq`, in order: rows of (seq, kind, body), read by
    position or by name (not copied into dicts: 2 µs a row, a fifth of a long run's load)."""
    return await store.fetchall(
        "SELECT seq, kind, body FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (run_id, seq, limit),
    )


async def change_counter(store: Store) -> int:
    """Moves when another connection committed: unchanged means nothing new."""
    return await store.change_counter()


async def changed_runs(store: Store, since: int) -> tuple[list[dict[str, Any]], int]:
    """The fleet's change feed: the runs whose row changed at or after the cursor `since`
    (0: every run), with their summary (`store/feed.py`), and the next cursor."""
    rows, after = await store.runs_changed(FEED_COLUMNS, since)
    return [{column: row[column] for column in FEED_COLUMNS} for row in rows], after


E = TypeVar("E", bound="EventBase")


async def last_event(store: Store, run_id: str, cls: type[E]) -> E | None:
    """The run's last stored event of class `cls`."""
    from loopdeck.core.events import kind_of

    rows = await store.fetchall(
        "SELECT body FROM events WHERE run_id = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
        (run_id, kind_of(cls)),
    )
    return cls.model_validate_json(rows[0]["body"]) if rows else None


async def all_runs(store: Store) -> list[Any]:
    """Every run's row, oldest first (read by name): its id, env, script, model, state, stop,
    detail, start and end, and its runner's pid and host."""
    return await store.fetchall(
        "SELECT run_id, env, script, model, state, stop_reason, detail, started_at, ended_at,"
        " pid, host FROM runs ORDER BY started_at"
    )


async def approval_request(store: Store, run_id: str, call_id: str) -> dict[str, Any] | None:
    """The newest request event for a call: its rationale, plan step and arguments, its
    schema and why an edit of it cannot be carried out (`not_editable`)."""
    return await _newest_body(store, run_id, "approval_requested", "call_id", call_id)


async def question_asked(store: Store, run_id: str, question_id: str) -> dict[str, Any] | None:
    """The event that asked a question: its title, choices and evidence."""
    return await _newest_body(store, run_id, "question_asked", "question_id", question_id)


async def _newest_body(
    store: Store, run_id: str, kind: str, field: str, value: str
) -> dict[str, Any] | None:
    rows = await store.fetchall(
        "SELECT body FROM events WHERE run_id = ? AND kind = ? ORDER BY seq DESC",
        (run_id, kind),
    )
    for row in rows:
        body = json.loads(row["body"])
        if body.get(field) == value:
            return dict(body)
    return None
