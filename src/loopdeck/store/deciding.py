"""An operator's decision (approve, reject, answer) taken by the store, whichever front end
made it: the inbox, a run's own dialog, `loopdeck approve/reject/answer`.

A store that cannot take the write for now (another process holds SQLite's write lock, a
backup, an unreachable server, a full disk: `StoreUnavailable`) is waited out: each attempt
waits the store's own busy timeout, then the next comes after a pause that doubles up to
LONGEST_PAUSE_S, for up to RETRY_FOR_S. The operator is told when the waiting begins, every
TELL_EVERY_S while it lasts, and when the decision lands; past the bound the last
`StoreUnavailable` is raised, saying how long it waited, and the request is still pending.

A store that refuses the login (`StoreRefused`: a changed password, a removed role) is not
waited out: it is raised at once, by name, and nothing was recorded.

A decision for a live run whose runner is gone is refused (`RunnerGone`) and the run marked
crashed: nothing would act on it, and an approval would read later as a write whose outcome
is unknown. A runner alive on this host whose heartbeat has been silent as long as a runner
elsewhere is called crashed after (`LOOPDECK_CRASH_SILENCE_S`) cannot reach the store (its
login refused, its server out of its reach): it would not hear the decision, which is refused
too (`RunnerOutOfReach`), nothing marked. A decision or an answer for a run that ended is
refused (`RunEnded`): its requests were withdrawn at its stop. Only the word on an unknown
outcome outlives its run. A run placed on workers (`store/leases.py`) takes a decision
whichever worker holds it, or none: the row is what the next one reads when it goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from loopdeck.store import leases, outcome_queries, queries
from loopdeck.store.base import Store, StoreError, StoreRefused, StoreUnavailable, Tx
from loopdeck.store.leases import is_placed
from loopdeck.store.liveness import crash_silence_s, runner_gone, this_host

if TYPE_CHECKING:  # a decision's type only: `loopdeck runs` loads no approval path
    from loopdeck.core.approvals import ApprovalDecision

RETRY_FOR_S = 60.0
FIRST_PAUSE_S = 0.1
LONGEST_PAUSE_S = 2.0
TELL_EVERY_S = 10.0  # a long wait is said again (a toast lasts about as long)

# What the operator is told while a decision waits for the store, and when it lands.
Tell = Callable[[str], None]
WHY = {
    StoreUnavailable.LOCKED: "store locked by another process",
    StoreUnavailable.UNREACHABLE: "store unreachable",
    StoreUnavailable.DISK_FULL: "the store's disk is full",
}


class RunnerGone(StoreError):
    """The run is live in the store but its runner process is gone: a decision is refused."""


class RunStranded(RunnerGone):
    """The run is placed on workers, but its worker's lease lapsed and it cannot move (its
    env's state, or its agent, lived in that worker): no worker will act on a decision."""


class RunnerOutOfReach(StoreError):
    """The run's runner is alive on this host but has not reached the store for long (its
    heartbeat silent): it would not hear a decision, which is refused."""


class RunEnded(StoreError):
    """The run ended (its requests withdrawn at its stop): a decision or answer is refused."""


def untold(_: str) -> None:
    """Nobody to tell (a caller that reports the outcome itself)."""


async def decide(
    store: Store,
    run_id: str,
    decision: ApprovalDecision,
    *,
    tell: Tell = untold,
    retry_for_s: float = RETRY_FOR_S,
    asked_at: str | None = None,
) -> bool:
    """Exactly one decision wins: False if the call was already decided, is not pending, or
    its asking expired (the run asks again: a decision never lands on an expired asking,
    where the run would not take it). A decision is made on one asking of the call:
    `asked_at` (its `requested_at`, as stored), else the one asked when this is called; it
    never lands on a later one (the run asked again while a locked store was waited out)."""
    what = f"{'approval' if decision.approved else 'rejection'} of {decision.call_id}"
    grant = None if decision.grant is None else decision.grant.model_dump(mode="json")
    if asked_at is None:
        asked_at = await asking(store, run_id, decision.call_id)

    async def once(tx: Tx) -> bool:
        return await queries.decide(
            tx,
            run_id,
            decision.call_id,
            approved=decision.approved,
            by=decision.by,
            reason=decision.reason,
            args=decision.args,
            grant=grant,
            asked_at=asked_at,
            backend=store.backend,
        )

    return await _taken(store, run_id, what, once, tell, retry_for_s)


async def asking(store: Store, run_id: str, call_id: str) -> str | None:
    """When the call's current asking was requested (as stored), None if it is not there or
    the store cannot be read now (the decision then waits for the store unbound)."""
    try:
        rows = await store.fetchall(
            "SELECT requested_at FROM approvals WHERE run_id = ? AND call_id = ?",
            (run_id, call_id),
        )
    except StoreUnavailable:
        return None
    return str(rows[0][0]) if rows and rows[0][0] is not None else None


async def answer(
    store: Store,
    run_id: str,
    text: str,
    by: str,
    *,
    question_id: str | None = None,
    tell: Tell = untold,
    retry_for_s: float = RETRY_FOR_S,
) -> bool:
    """The run's waiting question (or the one named) gets this answer; one answer wins."""
    what = f"answer to {question_id}" if question_id else f"answer to run {run_id}'s question"

    async def once(tx: Tx) -> bool:
        return await queries.answer(tx, run_id, text, by, question_id=question_id)

    return await _taken(store, run_id, what, once, tell, retry_for_s)


async def resolve(
    store: Store,
    run_id: str,
    call_id: str,
    *,
    applied: bool,
    by: str,
    tell: Tell = untold,
    retry_for_s: float = RETRY_FOR_S,
) -> str | None:
    """The operator's word on a write whose outcome is unknown: None when it is the one
    recorded, else why not. A run whose runner is gone is marked crashed, then resolved as a
    run that ended (the store keeps the word); one stranded on its lost worker (it cannot
    move) is ended by the next worker, and resolved after."""
    what = f"resolution of {call_id}"
    refused: list[str] = []

    async def once(tx: Tx) -> bool:
        why = await outcome_queries.resolve(tx, run_id, call_id, applied=applied, by=by)
        refused[:] = [why] if why else []
        return why is None

    try:
        await _taken(store, run_id, what, once, tell, retry_for_s, ended_too=True)
    except RunStranded as exc:  # ended crashed by the next worker: the word is kept then
        return f"{exc}; resolve it once it has ended, as for any ended run"
    except RunnerGone:
        await _taken(store, run_id, what, once, tell, retry_for_s, ended_too=True)
    return refused[0] if refused else None


async def pause_or_resume(
    store: Store, run_id: str, verb: str, by: str, *, tell: Tell = untold
) -> str | None:
    """`pause` or `resume` sent to the run's runner (None), unless the run would do nothing
    with it: paused already (or a pause on its way), or not paused: why not. Judged from the
    commands its runner has not taken yet, else the run's `paused` (set as its runner takes
    one: `queries.take_commands_of`); read and sent in one transaction, so two terminals
    never both send one. The console's `p` says the same (`pause_refusal`)."""
    refused: list[str] = []

    async def once(tx: Tx) -> bool:
        rows = await tx.fetchall("SELECT paused FROM runs WHERE run_id = ?", (run_id,))
        paused, queued = bool(rows and rows[0][0]), False
        sent = await tx.fetchall(
            "SELECT command FROM commands WHERE run_id = ? AND consumed_at IS NULL"
            " AND command IN ('pause', 'resume') ORDER BY id",
            (run_id,),
        )
        if sent:  # what its runner will make of the commands it has not taken yet
            paused, queued = sent[-1][0] == "pause", True
        if (why := pause_refusal(run_id, verb, paused, queued=queued)) is not None:
            refused[:] = [why]
            return False
        await queries.send_command(tx, run_id, verb, by)
        return True

    await _taken(store, run_id, f"{verb} of {run_id}", once, tell, RETRY_FOR_S)
    return refused[0] if refused else None


async def send_message(
    store: Store, run_id: str, text: str, by: str, *, tell: Tell = untold
) -> None:
    """The operator's words to the run's agent, recorded in the transaction that checks a
    runner will hear them; refused by name, nothing recorded, when none will (its runner
    gone, or stranded on its lost worker: `RunnerGone`; `RunnerOutOfReach`; `RunEnded`)."""

    async def once(tx: Tx) -> bool:
        await queries.send_message(tx, run_id, text, by)
        return True

    await _taken(store, run_id, f"message to {run_id}", once, tell, RETRY_FOR_S)


class StopHeld(NamedTuple):
    """Why a cancel or a kill, recorded, is not taken at once (`stop`), in words that follow
    "WORD recorded; "; and how the run ends then ("crashed" for one stranded on its lost
    worker; None: as the stop says, once its runner takes it)."""

    words: str
    ends: str | None


async def stop(
    store: Store, run_id: str, verb: str, by: str, *, tell: Tell = untold
) -> StopHeld | None:
    """`cancel` or `kill` sent to the run's runner: None when it takes it now; else why not
    yet (`StopHeld`): stranded on its lost worker (`leases.stranded`), or its runner's
    heartbeat silent. Either way it is recorded: the run ends. A runner gone (not on a
    worker) is refused as a decision is (`RunnerGone`); a run that ended is not (the caller
    says it ended)."""
    held: list[StopHeld] = []
    word = "stop" if verb == "cancel" else verb

    async def once(tx: Tx) -> bool:
        held.clear()
        if (why := await leases.stranded_run(tx, run_id)) is not None:
            held.append(StopHeld(
                f"its worker's lease lapsed, and it cannot go on ({why}): the next worker to"
                f" take it up ends it crashed (its own worker, if it reaches the store again"
                f" first, takes the {word})", "crashed",
            ))  # fmt: skip
        elif (silent := await _silent_runner(tx, run_id)) is not None:
            held.append(StopHeld(f"its runner {silent}: it takes the {word} once it does", None))
        await queries.send_command(tx, run_id, verb, by)
        return True

    what = f"{verb} of {run_id}"
    await _taken(store, run_id, what, once, tell, RETRY_FOR_S, ended_too=True, stop=True)
    return held[0] if held else None


async def _silent_runner(tx: Tx, run_id: str) -> str | None:
    """`_out_of_reach` of its runner; None for a run on workers (a worker takes it up)."""
    rows = await tx.fetchall(
        "SELECT state, pid, host, heartbeat_at FROM runs WHERE run_id = ?", (run_id,)
    )
    if not rows or rows[0]["state"] not in queries.LIVE_STATES or await is_placed(tx, run_id):
        return None
    return _out_of_reach(rows[0], this_host(), time.time(), crash_silence_s())


def pause_refusal(run_id: str, verb: str, paused: bool, *, queued: bool = False) -> str | None:
    """Why the run would do nothing with `verb` (`pause`, `resume`), paused as it is (or will
    be, `queued`: by a command not taken yet); None when it would."""
    if paused != (verb == "pause"):
        return None
    way = " (sent, not taken yet)" if queued else ""
    if paused:
        return f"{run_id} is already paused{way}: `loopdeck resume {run_id}` resumes it"
    return f"{run_id} is not paused{way}: nothing to resume"


async def _taken(
    store: Store,
    run_id: str,
    what: str,
    once: Callable[[Tx], Awaitable[bool]],
    tell: Tell,
    retry_for_s: float,
    *,
    ended_too: bool = False,
    stop: bool = False,
) -> bool:
    """`once` in a transaction of its own, a store unavailable for now waited out; `RunEnded`
    unless `ended_too` (a word that outlives the run), `RunStranded` and `RunnerOutOfReach`
    unless it is a `stop` (recorded: the run ends either way)."""
    started = time.monotonic()
    pause = FIRST_PAUSE_S
    told: float | None = None  # when the operator was last told, into the wait
    while True:
        try:
            won = await _while_runner_alive(store, run_id, once, what, ended_too, stop)
        except StoreRefused:
            raise  # until someone changes the credentials: said at once, nothing recorded
        except StoreUnavailable as exc:
            waited = time.monotonic() - started
            if waited >= retry_for_s:
                raise StoreUnavailable(
                    f"{exc}; gave up on your {what} after {waited:.0f}s of retrying:"
                    " it is still pending, decide again",
                    exc.cause,
                ) from exc
            why = WHY.get(exc.cause, exc.cause)
            if told is None:
                tell(f"{why}, retrying your {what} (for up to {retry_for_s:.0f}s)…")
                told = waited
            elif waited - told >= TELL_EVERY_S:
                tell(f"{why}, still retrying your {what} ({waited:.0f}s of {retry_for_s:.0f}s)…")
                told = waited
            await asyncio.sleep(min(pause, retry_for_s - waited))
            pause = min(pause * 2, LONGEST_PAUSE_S)
            continue
        if told is not None and won:
            tell(f"your {what} landed after {time.monotonic() - started:.1f}s")
        return won


async def _while_runner_alive(
    store: Store,
    run_id: str,
    once: Callable[[Tx], Awaitable[bool]],
    what: str,
    ended_too: bool,
    stop: bool = False,
) -> bool:
    """The runner's liveness is checked inside the decision's own write transaction, so no
    other writer (a reader marking the run crashed, the runner recording its stop) lands
    between the check and the update. The window left: the runner may die after the check,
    before it reads the decision; a reader then marks the run crashed and an approval shows
    as a write whose outcome is unknown, which it truly is (nobody can tell from the store
    whether the runner began it). A run that ended is refused in the same transaction."""
    gone: str | None = None
    async with store.transaction(run_id) as tx:
        rows = await tx.fetchall(
            "SELECT state, stop_reason, pid, host, heartbeat_at, pid_started FROM runs"
            " WHERE run_id = ?",
            (run_id,),
        )
        if rows and rows[0]["state"] in queries.LIVE_STATES and await is_placed(tx, run_id):
            # A worker goes on with it (the decision waits in its row), unless none can.
            why = None if stop else await leases.stranded_run(tx, run_id)
            if why is not None:
                raise RunStranded(
                    f"run {run_id}'s runner is gone (its worker's lease lapsed, and it cannot"
                    f" go on: {why}): nothing will act on your {what}; the next worker to"
                    " take it up ends it crashed"
                )
        elif rows and rows[0]["state"] in queries.LIVE_STATES:
            here, now, silence_s = this_host(), time.time(), crash_silence_s()
            gone = runner_gone(rows[0], here=here, now=now, silence_s=silence_s)
            silent = None if stop else _out_of_reach(rows[0], here, now, silence_s)
            if gone is None and silent:
                raise RunnerOutOfReach(
                    f"run {run_id}'s runner {silent}: it cannot hear your {what}, so nothing"
                    " was recorded; try again once it reaches the store"
                )
        elif rows and not ended_too:
            ended = rows[0]["stop_reason"] or rows[0]["state"]
            raise RunEnded(f"run {run_id} already ended ({ended}): nothing will act on your {what}")
        if gone is None:
            return await once(tx)
    # Marked as any reader would (its pending requests withdrawn); a store too busy for the
    # mark leaves it to the next reader: the refusal stands either way.
    try:
        await queries.mark_crashed(store, run_id, gone)
        marked = "; the run is marked crashed"
    except StoreUnavailable:
        marked = ""
    raise RunnerGone(
        f"run {run_id}'s runner is gone ({gone}): nothing will act on your {what}{marked}"
    )


def _out_of_reach(row: Any, here: str, now: float, silence_s: float) -> str | None:
    """Why a runner alive on this host is known not to reach the store: its heartbeat silent
    `silence_s` (elsewhere that silence is a crash, `runner_gone`)."""
    beat = row["heartbeat_at"]
    if row["host"] != here or beat is None or now - beat <= silence_s:
        return None
    return (
        f"(pid {row['pid']} on {here}) has not reached the store for {now - beat:.0f}s: its"
        " heartbeat is silent (the store may refuse its login, or be out of its reach)"
    )


async def give_back(store: Store, ids: list[int]) -> None:
    """Commands a worker took for a run that stopped being its own meanwhile (it ended, was
    parked or handed back while the read was on its way): untaken again, for the run's next
    worker to take or its end to say not carried out, never dropped."""
    if ids:
        marks = ", ".join("?" for _ in ids)
        async with store.transaction() as tx:
            await tx.execute(
                f"UPDATE commands SET consumed_at = NULL WHERE id IN ({marks})", tuple(ids)
            )
