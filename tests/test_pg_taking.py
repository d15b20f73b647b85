"""A writer's COPY on PostgreSQL takes the events published while it goes (issue 43): a
runaway's rows reach the server as they are made, in the same transaction, each linked after
the last row sent; a commit that fails after taking them requeues them with its batch, in
order, and the chain holds once it lands."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

import pytest
from conftest import fresh_pg_database, pg_cluster

from loopdeck.core.events import Event, ReviewVerdict, RunStarted
from loopdeck.store import writer as writer_module
from loopdeck.store.base import Store, Tx
from loopdeck.store.event_rows import RunRows
from loopdeck.store.opening import open_store
from loopdeck.store.verification import verify_run
from loopdeck.store.writer import BATCH_MAX, EventWriter

CHUNKS = 6  # published one a turn of the loop, after a full batch
CHUNK = 64
LAST = 1 + BATCH_MAX + CHUNKS * CHUNK


@pytest.fixture
async def store(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Store]:
    pg_cluster()  # skips where PostgreSQL cannot be started
    # However slow the machine, the COPY keeps taking while events come.
    monkeypatch.setattr(writer_module, "TAKING_S", 600.0)
    opened = await open_store(fresh_pg_database(monkeypatch))
    try:
        yield opened
    finally:
        await opened.close()


def verdict(seq: int) -> ReviewVerdict:
    return ReviewVerdict(run_id="r1", seq=seq, round=1, verdict="fail", reasons=[],
                         before_hash="a", after_hash="b")  # fmt: skip


async def started(store: Store) -> tuple[EventWriter, list[int]]:
    """A writer whose run's first batch is committed; the sizes of its later commits."""
    writer = EventWriter(store)
    writer.start()
    writer(RunStarted(run_id="r1", seq=1, env="e", script=None, model="m", mode="rounds",
                      goal="g", budget={}))  # fmt: skip
    await writer.flush()
    sizes: list[int] = []
    commit = writer.commit

    async def counted(batch: list[tuple[Event, str, object]]) -> None:
        await commit(batch)  # type: ignore[arg-type]
        sizes.append(len(batch))  # the batch as committed, with what it took

    writer.commit = counted  # type: ignore[method-assign]
    return writer, sizes


async def runaway(writer: EventWriter) -> None:
    """A full batch (its commit begins at once), then a chunk of events each turn."""
    seq = 2
    for count in (BATCH_MAX, *[CHUNK] * CHUNKS):
        for _ in range(count):
            writer(verdict(seq))
            seq += 1
        await asyncio.sleep(0)


async def committed_through(writer: EventWriter, seq: int) -> None:
    while writer.acknowledged_seq < seq:
        await asyncio.sleep(0.01)


async def failed(writer: EventWriter) -> None:
    while writer.error is None:
        await asyncio.sleep(0.01)


async def test_events_published_while_a_batch_is_copied_are_committed_with_it(
    store: Store,
) -> None:
    writer, sizes = await started(store)
    await runaway(writer)
    await asyncio.wait_for(committed_through(writer, LAST), 60)
    assert sizes == [LAST - 1]  # one transaction, not the batch and then what came meanwhile
    rows = await store.fetchall("SELECT seq FROM events WHERE run_id = 'r1' ORDER BY seq")
    assert [row[0] for row in rows] == list(range(1, LAST + 1))
    last = await store.fetchall("SELECT last_seq FROM runs WHERE run_id = 'r1'")
    assert last[0][0] == LAST
    assert (await verify_run(store, "r1")).broken is None
    await writer.close()


async def test_a_commit_that_fails_after_taking_events_requeues_them_in_order(
    store: Store,
) -> None:
    writer, sizes = await started(store)
    clash = LAST - 10  # among the events the COPY takes while it goes
    await store.execute(
        "INSERT INTO events (run_id, seq, kind, at, body) VALUES ('r1', ?, 'x', 'x', '{}')",
        (clash,),
    )
    await runaway(writer)
    while writer.error is None:  # the COPY failed on the clash
        await asyncio.sleep(0.01)
    assert writer.acknowledged_seq == 1 and sizes == []
    await store.execute("DELETE FROM events WHERE run_id = 'r1' AND seq = ?", (clash,))
    await asyncio.wait_for(committed_through(writer, LAST), 60)
    rows = await store.fetchall("SELECT seq, kind FROM events WHERE run_id = 'r1' ORDER BY seq")
    assert [row[0] for row in rows] == list(range(1, LAST + 1))
    assert {row[1] for row in rows[1:]} == {"review_verdict"}
    assert (await verify_run(store, "r1")).broken is None
    await writer.close()


async def test_a_runs_row_that_fails_while_the_copy_ends_leaves_the_batch_queued(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs row is worked out while the server takes the COPY's last rows: its failure
    fails the COPY, and the batch it grew to is committed whole once it no longer fails."""
    writer, sizes = await started(store)
    apply_batch, failing = RunRows.apply_batch, True

    async def fails(rows: RunRows, tx: Tx, events: Iterable[Event]) -> None:
        if failing:  # each try, until the test lets it through
            raise RuntimeError("the runs row could not be worked out")
        await apply_batch(rows, tx, events)

    monkeypatch.setattr(RunRows, "apply_batch", fails)
    await runaway(writer)
    await asyncio.wait_for(failed(writer), 60)
    assert "the runs row could not be worked out" in str(writer.error)
    assert writer.acknowledged_seq == 1 and sizes == []
    stored = await store.fetchall("SELECT COUNT(*) FROM events WHERE run_id = 'r1'")
    assert stored[0][0] == 1  # nothing of the failed COPY landed
    failing = False
    await asyncio.wait_for(committed_through(writer, LAST), 60)
    last = await store.fetchall("SELECT last_seq FROM runs WHERE run_id = 'r1'")
    assert last[0][0] == LAST
    assert (await verify_run(store, "r1")).broken is None
    await writer.close()
