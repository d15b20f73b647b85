"""A decision is carried out exactly as the store records it, or refused by name, however it
races the run's expiry: a decision on an expired asking is refused by the store itself (the
row's expiry checked in the same update), it never lands on a later asking than the one it
was made on, and a decision the store took just before the expiry still reaches the run.
A run stopped after its unanswered asks withdraws the write it was asking about. The races
are made with hooks at the moment they matter, never with timing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES
from test_decision_refusals import Cli, Recorded, record, recorded, rows

from loopdeck.cli import main
from loopdeck.core.approvals import ApprovalDecision
from loopdeck.core.states import RunState, StopReason
from loopdeck.operator.launch import RunOptions
from loopdeck.operator.session import RunSession
from loopdeck.store import deciding, queries
from loopdeck.store.base import Tx
from loopdeck.store.opening import open_store

Hook = Callable[[str, str, int], Awaitable[None]]


async def _waited_run(db: Path, ttl_s: float, hook: Hook) -> tuple[Any, list[Any]]:
    """order_support/solve recorded, its write waiting on the store (`--approve wait`), each
    request expiring after `ttl_s`; `hook(run_id, call_id, n)` runs after the n-th expiry,
    while the run reads its state before it asks again (the window a decision can race)."""
    session = RunSession(db)
    options = RunOptions(env=str(SAMPLES / "order_support"), script="solve", approve="wait")
    prepared = session.prepare(options)
    runtime = prepared.runtime
    runtime.config = runtime.config.model_copy(update={"approval_ttl_s": ttl_s})
    events: list[Any] = []
    runtime.bus.subscribe(events.append)
    real = runtime.state_hash
    expiries = 0

    async def state_hash() -> str:
        nonlocal expiries
        last = events[-1] if events else None
        if last is not None and last.kind == "approval_invalidated":
            expiries += 1
            await hook(runtime.config.run_id, last.call_id, expiries)
        return await real()

    runtime.state_hash = state_hash  # type: ignore[method-assign]
    try:
        async with session.opened():
            outcome = await session.record()
    finally:
        session.cleanup()
    return outcome, events


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`loopdeck` in a thread of its own (its own event loop), as another terminal runs it."""
    code = main(list(argv))
    return code, capsys.readouterr().err


async def test_a_rejection_landing_between_an_expiry_and_the_next_ask_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The explorer's case: the request expired, the run reads its state to ask again, a
    `reject` lands in between. It said `rejected` (exit 0) and the next ask wiped it."""
    db = tmp_path / "s.db"
    said: list[tuple[int, str]] = []

    async def reject(run_id: str, call_id: str, n: int) -> None:
        if n == 1:
            argv = ("reject", run_id, call_id, "--reason", "not today", "--db", str(db))
            said.append(await asyncio.to_thread(_cli, capsys, *argv))

    outcome, events = await _waited_run(db, 0.3, reject)
    [(code, err)] = said
    assert code == 1, err
    assert f"{'c3'}'s approval request expired unanswered at " in err
    assert "nothing was decided; the run will ask again" in err
    # Nothing was recorded that the run did not carry out: no rejection anywhere.
    assert not [e for e in events if e.kind == "approval_decided"]
    assert outcome.stop_reason is StopReason.POLICY_BLOCK
    store = await open_store(db)
    try:
        found = await store.fetchall("SELECT state, reason FROM approvals WHERE call_id = 'c3'")
    finally:
        await store.close()
    # The run stopped after three unanswered asks: its write is withdrawn, not left waiting.
    assert [(row["state"], row["reason"]) for row in found] == [("withdrawn", None)]
    assert [e.kind for e in events if e.kind == "approval_withdrawn"] == ["approval_withdrawn"]


async def test_a_decision_the_store_took_just_before_the_expiry_reaches_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rejection recorded before the request expired, which the run's approver had not yet
    read when the expiry came: the run still carries it out (it was wiped by the next ask).
    The request lives 3 s (the rejection lands well inside it on a loaded machine) and the
    last look is long (what is tested is that there is one, not its length)."""
    db = tmp_path / "s.db"
    from loopdeck.core import write_approvals
    from loopdeck.store import approver

    monkeypatch.setattr(write_approvals, "LAST_LOOK_S", 60.0)

    real = approver.decision_from_store
    rejected = asyncio.Event()

    async def slow_reader(store: Any, request: Any) -> ApprovalDecision:
        # The reject is recorded while the request is open; the approver reads it only
        # after the request expired (a reader held up: a slow poll, a busy store).
        if not rejected.is_set():
            no = ApprovalDecision(call_id=request.call_id, approved=False, reason="no", by="ops")
            assert await deciding.decide(store, request.run_id, no)
            rejected.set()
            wait = (request.expires_at - datetime.now(UTC)).total_seconds()
            await asyncio.sleep(max(wait, 0) + 0.05)
        return await real(store, request)

    async def nothing(run_id: str, call_id: str, n: int) -> None:
        return None

    approver.decision_from_store = slow_reader  # type: ignore[assignment]
    try:
        outcome, events = await _waited_run(db, 3.0, nothing)
    finally:
        approver.decision_from_store = real  # type: ignore[assignment]
    decided = [e for e in events if e.kind == "approval_decided"]
    assert [(e.approved, e.reason) for e in decided] == [(False, "no")]
    assert not [e for e in events if e.kind == "approval_invalidated"]
    update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
    assert update.status.value == "rejected"


def test_a_decision_never_lands_on_a_later_asking_than_the_one_it_was_made_on(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`approve` read the request; before its update lands, the request expired and the run
    asked again (made here inside the update's own transaction, where the race would be):
    the approval is refused, naming the new request, which stays undecided."""
    db = tmp_path / "s.db"
    recorded(db, Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1"))
    real = queries.decide
    later = datetime.now(UTC) + timedelta(minutes=9)

    async def asked_again_first(tx: Tx, run_id: str, call_id: str, **kwargs: Any) -> bool:
        await tx.execute(
            "UPDATE approvals SET requested_at = ?, expires_at = ? WHERE call_id = ?",
            ((later - timedelta(minutes=5)).isoformat(), later.isoformat(), call_id),
        )
        return await real(tx, run_id, call_id, **kwargs)

    monkeypatch.setattr(queries, "decide", asked_again_first)
    code, said, err = cli("approve", "r1", "c1", "--json", "--db", str(db))
    assert code == 1
    assert "the run asked again (its new request expires at " in err
    assert "before your approve landed: nothing was decided; check the new request" in err
    assert said is not None and said["decided"] is False
    assert rows(db) == {"r1/c1": ("pending", None, None)}


async def test_the_store_refuses_a_decision_on_an_expired_or_earlier_asking(
    tmp_path: Path,
) -> None:
    """Whatever front end decides (the inbox, a link, a console's dialog): the update itself
    checks the asking's expiry and, when named, that it is still the one decided."""
    store = await open_store(tmp_path / "s.db")
    no = ApprovalDecision(call_id="c1", approved=False, reason="no", by="console inbox")
    try:
        await record(
            store, Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1", ttl_s=0.001)
        )
        await asyncio.sleep(0.01)
        assert not await deciding.decide(store, "r1", no)
        run = Recorded("r2").started(RunState.AWAITING_APPROVAL).write("c1")
        await record(store, run)
        first = await deciding.asking(store, "r2", "c1")
        await asyncio.sleep(0.01)
        again = Recorded("r2").write("c1")  # asked again: the same row, a new asking
        again.events[0] = again.events[0].model_copy(update={"seq": len(run.events) + 1})
        await record(store, again)
        assert await deciding.asking(store, "r2", "c1") != first
        assert not await deciding.decide(store, "r2", no, asked_at=first)
        assert await deciding.decide(store, "r2", no)
        found = await store.fetchall("SELECT run_id, state FROM approvals ORDER BY run_id")
    finally:
        await store.close()
    assert [(row["run_id"], row["state"]) for row in found] == [
        ("r1", "pending"),
        ("r2", "rejected"),
    ]


def test_approve_on_a_run_that_ended_says_it_ended_before_it_says_expired(
    tmp_path: Path, cli: Cli
) -> None:
    db = tmp_path / "s.db"
    run = Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1", ttl_s=0.001)
    recorded(db, run.stopped(withdrawn=[]))
    for command in ("approve", "reject"):
        code, said, err = cli(command, "r1", "c1", "--json", "--db", str(db))
        assert code == 1
        assert "run r1 already ended (killed): nothing will act on your" in err
        assert "its request was withdrawn when the run stopped" in err
        assert "expired" not in err
        assert said is not None and (said["decided"], said["state"]) == (False, "withdrawn")


def test_a_message_of_nothing_but_whitespace_says_so(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    db = tmp_path / "s.db"
    recorded(db, Recorded("r1").started(RunState.AWAITING_APPROVAL))
    monkeypatch.setattr("sys.stdin", io.StringIO("  \n\t\n"))
    code, _, err = cli("message", "r1", "-", "--db", str(db))
    assert code == 2
    assert "stdin is nothing but whitespace: nothing to say to the agent" in err
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, _, err = cli("message", "r1", "-", "--db", str(db))
    assert code == 2 and "stdin is empty" in err


def test_the_cli_decides_the_asking_it_read_not_one_asked_since(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`approve` read the request (its terms checked against it); the run asked again before
    the decision began: the approval is of the asking read, never the new one."""
    from loopdeck.operator import records

    db = tmp_path / "s.db"
    recorded(db, Recorded("r1").started(RunState.AWAITING_APPROVAL).write("c1"))
    later = datetime.now(UTC) + timedelta(minutes=9)
    real = records.asked

    async def asked_again_after(store: Any, run_id: str, call_id: str) -> Any:
        read = await real(store, run_id, call_id)
        await store.execute(
            "UPDATE approvals SET requested_at = ?, expires_at = ? WHERE call_id = ?",
            ((later - timedelta(minutes=5)).isoformat(), later.isoformat(), call_id),
        )
        return read

    monkeypatch.setattr(records, "asked", asked_again_after)
    code, said, err = cli("approve", "r1", "c1", "--json", "--db", str(db))
    assert code == 1, err
    assert said is not None and said["decided"] is False
    assert rows(db) == {"r1/c1": ("pending", None, None)}
