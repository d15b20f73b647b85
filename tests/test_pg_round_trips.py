"""What a worker's commits cost in round trips to PostgreSQL (issue 43): a step's events in
two (BEGIN, the run's lock and the fence with their first read; the rows, the runs row and the
COMMIT after it), a batch of many events in three messages (its COPY between them), a claim
in two, and a failed statement (or COPY) in a pipelined transaction still raised, with
nothing of the transaction landed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from conftest import fresh_pg_database, pg_cluster
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from worker_helpers import options

from loopdeck.core.events import CallStatus, Event, ReviewVerdict, RunStarted, ToolFinished
from loopdeck.operator.placement import submitted
from loopdeck.store import leases
from loopdeck.store.base import PIPELINED_ROWS, Store, StoreError
from loopdeck.store.chain import CHAINED_COLUMNS
from loopdeck.store.opening import open_store
from loopdeck.store.verification import verify_run
from loopdeck.store.writer import EventWriter

pytestmark = pytest.mark.usefixtures("pg")
A = leases.WorkerName("host-a", 101, "aaaa")


@pytest.fixture
def pg() -> None:
    pg_cluster()  # skips the module where PostgreSQL cannot be started


class TurnCounter:
    """A loopback proxy to the session's cluster that counts the points at which a client
    waits for the server's answers (PostgreSQL's wire protocol: a type byte, then the
    length): each Sync and each simple Query, and each Flush request not sent straight after a
    Sync (psycopg's pipeline sends one with its last Sync, and waits once for both)."""

    def __init__(self) -> None:
        self.turns = 0
        self.kinds: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def start(self, target_port: int) -> int:
        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)

            async def client() -> None:
                pending, started = b"", False
                while data := await reader.read(65536):
                    up_writer.write(data)
                    pending += data
                    while True:
                        if not started:  # the startup message (and an SSL request): untyped
                            if len(pending) < 4:
                                break
                            size = int.from_bytes(pending[:4], "big")
                            if len(pending) < size:
                                break
                            code = int.from_bytes(pending[4:8], "big")
                            pending, started = pending[size:], code != 80877103
                            continue
                        if len(pending) < 5:
                            break
                        size = int.from_bytes(pending[1:5], "big")
                        if len(pending) < size + 1:
                            break
                        kind, pending = pending[:1], pending[size + 1 :]
                        after_sync = bool(self.kinds) and self.kinds[-1] == b"S"
                        self.kinds.append(kind)
                        if kind in (b"S", b"Q") or (kind == b"H" and not after_sync):
                            self.turns += 1
                    await up_writer.drain()
                up_writer.close()

            async def server() -> None:
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()
                writer.close()

            await asyncio.gather(client(), server(), return_exceptions=True)

        self._server = await asyncio.start_server(connected, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


@pytest.fixture
async def counted(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Store, TurnCounter]]:
    url = fresh_pg_database(monkeypatch)
    cluster = pg_cluster()
    counter = TurnCounter()
    port = await counter.start(cluster.port)
    store = await open_store(url.replace(f":{cluster.port}/", f":{port}/"))
    try:
        yield store, counter
    finally:
        await store.close()
        counter.close()


async def turns_of(counter: TurnCounter, work: object) -> int:
    before = counter.turns
    await work  # type: ignore[misc]
    await asyncio.sleep(0)  # the proxy has passed on what it read
    return counter.turns - before


def verdict(seq: int) -> ReviewVerdict:
    return ReviewVerdict(run_id="r1", seq=seq, round=1, verdict="fail", reasons=[],
                         before_hash="a", after_hash="b")  # fmt: skip


async def test_a_workers_step_is_committed_in_two_round_trips_and_a_claim_in_two(
    counted: tuple[Store, TurnCounter], tmp_path: Path
) -> None:
    store, counter = counted
    assert await turns_of(counter, leases.claim(store, A, 30)) <= 2  # none to claim
    await leases.submit(store, "r1", submitted(options(tmp_path, run_id="r1")))
    claiming = leases.claim(store, A, 30)
    assert await turns_of(counter, claiming) <= 2
    placed = await leases.placement(store, "r1")
    assert placed is not None and placed["state"] == leases.HELD
    writer = EventWriter(store, fence=("r1", int(placed["epoch"])))
    writer(RunStarted(run_id="r1", seq=1, env="e", script=None, model="m", mode="rounds",
                      goal="g", budget={}))  # fmt: skip
    await writer.flush()
    for seq in (2, 3, 4):
        writer(verdict(seq))
    # BEGIN, the run's lock, the fence (with the run's row) | the rows, the runs row, COMMIT
    assert await turns_of(counter, writer.flush()) == 2
    rows = await store.fetchall("SELECT seq FROM events WHERE run_id = 'r1' ORDER BY seq")
    assert [row[0] for row in rows] == [1, 2, 3, 4]
    last = await store.fetchall("SELECT last_seq FROM runs WHERE run_id = 'r1'")
    assert last[0][0] == 4
    await writer.close()


async def test_a_statement_that_fails_in_a_pipelined_transaction_is_raised_and_nothing_lands(
    counted: tuple[Store, TurnCounter],
) -> None:
    store, _ = counted
    writer = EventWriter(store)
    writer(RunStarted(run_id="r1", seq=1, env="e", script=None, model="m", mode="rounds",
                      goal="g", budget={}))  # fmt: skip
    writer(verdict(2))
    await writer.flush()
    await writer.close()
    clash = ("r1", 2, "review_verdict", "2026-01-01T00:00:00+00:00", "{}", "0" * 64)
    with pytest.raises(StoreError, match=r"UniqueViolation|duplicate key"):
        async with store.transaction("r1", pipelined=True) as tx:
            await tx.execute("UPDATE runs SET last_seq = 99 WHERE run_id = 'r1'")
            await tx.append("events", CHAINED_COLUMNS, [clash])
            await tx.execute("UPDATE runs SET goal = 'changed' WHERE run_id = 'r1'")
    rows = await store.fetchall("SELECT last_seq, goal FROM runs WHERE run_id = 'r1'")
    assert tuple(rows[0]) == (2, "g")  # nothing of it landed, and the store goes on


async def test_a_batch_of_many_events_is_committed_in_three_messages(
    counted: tuple[Store, TurnCounter],
) -> None:
    store, counter = counted
    writer = EventWriter(store)
    writer(RunStarted(run_id="r1", seq=1, env="e", script=None, model="m", mode="rounds",
                      goal="g", budget={}))  # fmt: skip
    await writer.flush()
    count = 3 * PIPELINED_ROWS
    for seq in range(2, count + 2):
        writer(verdict(seq))
    # BEGIN, the run's lock and its row | COPY (its rows, then its end) | the runs row, COMMIT
    assert await turns_of(counter, writer.flush()) == 3
    rows = await store.fetchall("SELECT seq FROM events WHERE run_id = 'r1' ORDER BY seq")
    assert [row[0] for row in rows] == list(range(1, count + 2))
    last = await store.fetchall("SELECT last_seq FROM runs WHERE run_id = 'r1'")
    assert last[0][0] == count + 1
    assert (await verify_run(store, "r1")).broken is None
    await writer.close()


async def test_a_copy_that_fails_in_a_pipelined_transaction_is_raised_and_nothing_lands(
    counted: tuple[Store, TurnCounter],
) -> None:
    store, _ = counted
    writer = EventWriter(store)
    writer(RunStarted(run_id="r1", seq=1, env="e", script=None, model="m", mode="rounds",
                      goal="g", budget={}))  # fmt: skip
    writer(verdict(2))
    await writer.close()
    rows = [
        ("r1", seq, "review_verdict", "2026-01-01T00:00:00+00:00", "{}", "0" * 64)
        for seq in range(PIPELINED_ROWS + 1, 1, -1)  # its last row clashes with event 2
    ]
    with pytest.raises(StoreError, match=r"UniqueViolation|duplicate key"):
        async with store.transaction("r1", pipelined=True) as tx:
            await tx.execute("UPDATE runs SET last_seq = 99 WHERE run_id = 'r1'")
            await tx.append("events", CHAINED_COLUMNS, rows)
            await tx.execute("UPDATE runs SET goal = 'changed' WHERE run_id = 'r1'")
    kept = await store.fetchall("SELECT last_seq, goal FROM runs WHERE run_id = 'r1'")
    assert tuple(kept[0]) == (2, "g")
    count = await store.fetchall("SELECT count(*) FROM events WHERE run_id = 'r1'")
    assert count[0][0] == 2  # nothing of it landed, and the store goes on


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(st.text(), min_size=1, max_size=5), words=st.text())
@example(texts=["\x00"], words="a goal \x00 with a NUL")
async def test_whatever_text_a_batched_commit_carries_lands_as_it_was(
    counted: tuple[Store, TurnCounter], texts: list[str], words: str
) -> None:
    """Values are bound into the statements by psycopg's client-side cursor: quotes,
    backslashes, `?`, `%`, `;` land as the writer's INSERT landed them one statement at a time.
    A NUL is kept in the event (escaped in its JSON); the run's row, whose text PostgreSQL
    cannot give a NUL, shows U+FFFD in its place, where the commit failed whole before."""
    store, _ = counted
    run_id = f"r{uuid.uuid4().hex[:8]}"
    writer = EventWriter(store)
    events: list[Event] = [RunStarted(run_id=run_id, seq=1, env="e", script=None, model="m",
                                      mode="rounds", goal=words, budget={})]  # fmt: skip
    events += [
        ToolFinished(run_id=run_id, seq=n, call_id=f"c{n}", tool="t", status=CallStatus.EXECUTED,
                     result={"text": text}, duration_ms=0.5)
        for n, text in enumerate(texts, 2)
    ]  # fmt: skip
    for event in events:
        writer(event)
    await writer.close()
    rows = await store.fetchall("SELECT body FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
    assert [row[0] for row in rows] == [event.as_json() for event in events]
    goal = await store.fetchall("SELECT goal FROM runs WHERE run_id = ?", (run_id,))
    assert RunStarted.model_validate_json(rows[0][0]).goal == words
    assert goal[0][0] == words.replace("\x00", "\ufffd")
    assert (await verify_run(store, run_id)).broken is None
