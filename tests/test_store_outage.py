"""A store that cannot take writes (unreachable, locked, disk full): the writer keeps the
events in order and spills them outside the store's folder, the run holds instead of acting
unrecorded, and the events land once the store is back (issue 24)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import HARNESS, prepare
from store_helpers import loopdeck

from loopdeck.core.events import EventBus, OperatorCommand
from loopdeck.core.recording import JournalOutage
from loopdeck.core.states import StopReason
from loopdeck.operator import run_waits
from loopdeck.store import queries
from loopdeck.store.base import Store, StoreUnavailable
from loopdeck.store.liveness import this_host
from loopdeck.store.opening import open_store
from loopdeck.store.runner import RecordedRun
from loopdeck.store.writer import EventWriter


async def until(condition: Any, timeout: float = 120.0) -> None:
    """Wait on a condition, never on a fixed sleep; the timeout only ends a broken test."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "condition never became true"
        await asyncio.sleep(0.01)


class _FakeTx:
    def __init__(self, stored: list[tuple[Any, ...]]) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.stored = stored

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return 1

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self.rows.extend(rows)

    async def append(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        self.rows.extend(rows)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        if "MAX(seq)" in sql:
            return [(max((row[1] for row in self.stored), default=None),)]
        return []  # no run row: nothing for the writer to correct


class FlakyStore(Store):
    """Fails the next `failures` commits with StoreUnavailable, after the inserts (as a full
    disk fails a commit): a failed transaction lands nothing."""

    backend = "fake"

    def __init__(self, path: Path, failures: int, cause: str = StoreUnavailable.DISK_FULL):
        self.path = path
        self.failures = failures
        self.cause = cause
        self.attempts = 0
        self.events: list[tuple[Any, ...]] = []
        self.lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def transaction(
        self, run_id: str | None = None, *, pipelined: bool = False
    ) -> AsyncIterator[_FakeTx]:
        tx = _FakeTx(self.events)
        yield tx
        self.attempts += 1
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable(f"{self.path}: {self.cause} (test)", self.cause)
        self.events.extend(tx.rows)


def _publish(bus: EventBus, count: int) -> None:
    for _ in range(count):
        bus.publish(OperatorCommand(run_id="r1", command="pause", by="t"))


async def test_the_writer_keeps_order_spills_outside_and_recovers(tmp_path) -> None:
    store = FlakyStore(tmp_path / "store" / "s.db", failures=3)
    bus = EventBus()
    writer = EventWriter(store)
    bus.subscribe(writer)
    writer.start()
    _publish(bus, 5)
    await until(lambda: writer.outage is not None)
    outage = writer.outage
    assert outage is not None and outage.cause == "disk full" and "(test)" in outage.detail
    assert outage.spill is not None
    spill = Path(outage.spill)
    assert store.path.parent not in spill.parents  # not on the store's (full) disk
    assert stat.S_IMODE(spill.stat().st_mode) == 0o600
    assert stat.S_IMODE(spill.parent.stat().st_mode) == 0o700
    lines = spill.read_text().splitlines()
    assert json.loads(lines[0])["store"] == str(store.path.resolve())
    assert [json.loads(line)["seq"] for line in lines[1:]] == [1, 2, 3, 4, 5]
    _publish(bus, 3)  # while the store is down: queued behind the others
    await asyncio.wait_for(writer.recovered(), 60)
    assert writer.outage is None and store.attempts == 4
    await writer.close()
    assert [row[1] for row in store.events] == list(range(1, 9))  # in order, once each
    assert not spill.exists()  # everything it held is in the store


async def test_a_spill_falls_back_when_the_user_data_dir_cannot_take_it(
    tmp_path, monkeypatch
) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocked))  # its spill folder cannot be made
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    store = FlakyStore(tmp_path / "s.db", failures=10**6, cause=StoreUnavailable.UNREACHABLE)
    writer = EventWriter(store)
    writer(OperatorCommand(run_id="r1", seq=1, command="pause", by="t"))
    with pytest.raises(StoreUnavailable):
        await writer.flush()
    assert writer.outage is not None
    assert writer.outage.spill == str(tmp_path / "run" / "loopdeck-spill" / "unsaved-r1.jsonl")
    writer.close_retry_s = 0.0
    with pytest.raises(StoreUnavailable):
        await writer.close()
    assert writer.spill() == Path(writer.outage.spill)


class FakeJournal:
    """A journal whose store can be taken down and brought back by the test."""

    def __init__(self, down: bool = False) -> None:
        self.outage: JournalOutage | None = None
        self.back = asyncio.Event()
        self.flushes = 0
        if down:
            self.go_down()

    def go_down(self) -> None:
        self.outage = JournalOutage(
            cause="unreachable", since=_now(), detail="server closed the connection", spill=None
        )
        self.back.clear()

    def come_back(self) -> None:
        self.outage = None
        self.back.set()

    async def flush(self) -> None:
        self.flushes += 1
        if self.outage is not None:
            raise StoreUnavailable("test: unreachable", StoreUnavailable.UNREACHABLE)

    async def recovered(self) -> None:
        await self.back.wait()


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


async def test_a_write_waits_while_the_journal_cannot_record_and_runs_once_it_can() -> None:
    prepared, rec = prepare(HARNESS, "note")
    runtime = prepared.runtime
    journal = FakeJournal()
    runtime.journal = journal

    def down_before_the_write(event: Any) -> None:
        if getattr(event, "kind", "") == "approval_decided":
            journal.go_down()  # the approval cannot be made durable: the write must wait

    runtime.bus.subscribe(down_before_the_write)
    try:
        task = asyncio.create_task(runtime.run())
        await until(lambda: rec.kinds("recording_held"))
        for _ in range(20):
            await asyncio.sleep(0)  # the run has every chance to go on: it must not
        assert not rec.kinds("tool_finished") and prepared.runtime.env.notes == []
        models = len(rec.kinds("model_called"))
        assert rec.kinds("budget_updated")[-1].held == "store"  # on the operator's clock
        journal.come_back()
        outcome = await task
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert rec.kinds("recording_resumed") and len(rec.kinds("model_called")) >= models
    assert [e.status.value for e in rec.kinds("tool_finished")] == ["executed"]
    assert any("store unreachable" in held for held in outcome.recording_held)


async def test_no_model_call_while_the_journal_cannot_record_and_the_bound_stops_it() -> None:
    prepared, rec = prepare(HARNESS, "note")
    runtime = prepared.runtime
    runtime.config = runtime.config.model_copy(update={"store_hold_s": 0.3})
    runtime.journal = FakeJournal(down=True)
    try:
        outcome = await runtime.run()
    finally:
        prepared.cleanup()
    assert not rec.kinds("model_called") and not rec.kinds("tool_finished")
    assert outcome.stop_reason is StopReason.POLICY_BLOCK
    assert outcome.detail.startswith("store unreachable for 0.3 s (server closed the connection)")
    assert outcome.detail.endswith("stopped rather than act unrecorded")
    held = rec.kinds("recording_held")
    assert len(held) == 1 and held[0].cause == "unreachable" and held[0].bound_s == 0.3


async def test_a_kill_ends_a_hold_at_once() -> None:
    prepared, rec = prepare(HARNESS, "note")
    runtime = prepared.runtime
    runtime.journal = FakeJournal(down=True)
    try:
        task = asyncio.create_task(runtime.run())
        await until(lambda: rec.kinds("recording_held"))
        runtime.kill(by="test")
        outcome = await task
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.KILLED and not rec.kinds("model_called")


class _Switch:
    """Takes a real store's writes down (StoreUnavailable before BEGIN) and back up."""

    def __init__(self, store: Store) -> None:
        self.down = False
        self._transaction = store.transaction
        store.transaction = self.transaction  # type: ignore[method-assign]

    def transaction(self, run_id: str | None = None, *, pipelined: bool = False) -> Any:
        if self.down:
            raise StoreUnavailable("test: the server went away", StoreUnavailable.UNREACHABLE)
        return self._transaction(run_id, pipelined=pipelined)


async def test_a_recorded_run_holds_through_an_outage_and_loses_nothing(db) -> None:
    store = await open_store(db)
    switch = _Switch(store)
    prepared, rec = prepare(HARNESS, "note")
    writer = EventWriter(store)

    def down_at_the_approval(event: Any) -> None:
        if getattr(event, "kind", "") == "approval_requested":
            switch.down = True

    prepared.runtime.bus.subscribe(down_at_the_approval)
    try:
        task = asyncio.create_task(RecordedRun(store, prepared.runtime, writer).run())
        await until(lambda: rec.kinds("recording_held"))
        assert not rec.kinds("tool_finished")  # the approval is not durable: no write
        switch.down = False
        outcome = await task
        rows = await store.fetchall("SELECT seq, kind FROM events ORDER BY seq")
    finally:
        prepared.cleanup()
        await store.close()
    assert outcome.stop_reason is StopReason.GOAL_MET
    assert [row[0] for row in rows] == list(range(1, rec.events[-1].seq + 1))  # none lost
    kinds = [row[1] for row in rows]
    assert kinds.count("run_stopped") == 1 and "recording_held" in kinds
    assert kinds.index("recording_held") < kinds.index("tool_finished")


async def test_a_runner_gone_in_an_outage_has_its_spill_brought_back(db) -> None:
    """The store stayed down past the runner's exit: its events went to a spill, a reader then
    marked the run crashed; the next process to open the store writes them back."""
    store = await open_store(db)
    switch = _Switch(store)
    prepared, rec = prepare(HARNESS, "note")
    writer = EventWriter(store)
    writer.close_retry_s = 0.0

    def down_once_the_write_runs(event: Any) -> None:
        # The approval is durable by then (flushed before the dispatch): the run row is in.
        if getattr(event, "kind", "") == "state_changed" and event.target.value == "executing":
            switch.down = True

    prepared.runtime.bus.subscribe(down_once_the_write_runs)
    recorded = RecordedRun(store, prepared.runtime, writer)
    try:
        outcome = await recorded.run()
    finally:
        prepared.cleanup()
    assert outcome.stop_reason is StopReason.GOAL_MET  # the write met the goal: no hold
    assert recorded.persist_error and "the unsaved events are in" in recorded.persist_error
    switch.down = False
    # The runner is gone (a pid no process has); a reader marks its run crashed.
    await store.execute("UPDATE runs SET pid = ?, pid_started = NULL", (2**22 + 1,))
    assert await queries.mark_crashed_runners(store) == [prepared.runtime.config.run_id]
    await store.close()
    reopened = await open_store(db, create=False)
    try:
        assert any("brought back" in note for note in reopened.notes)
        rows = await reopened.fetchall("SELECT seq, kind, origin FROM events ORDER BY seq")
        run = await queries.run_row(reopened, prepared.runtime.config.run_id)
    finally:
        await reopened.close()
    last = rec.events[-1].seq
    assert [row[0] for row in rows] == list(range(1, last + 2))  # every event, then the note
    assert [row[1] for row in rows].count("run_stopped") == 1
    assert rows[-1][1] == "run_corrected" and all(row[2] is None for row in rows)
    assert run is not None and run["stop_reason"] == "goal_met"
    assert not list(Path(os.environ["XDG_DATA_HOME"]).glob("**/unsaved-*"))


def _mount_small_disk(where: Path) -> None:
    where.mkdir()
    done = os.system(f"mount -t tmpfs -o size=2M tmpfs {where} 2>/dev/null")
    if done != 0:
        pytest.skip("mounting a 2 MB tmpfs is not permitted here (needs root)")


@pytest.mark.slow
async def test_a_full_disk_holds_the_run_spills_elsewhere_and_records_the_stop(tmp_path) -> None:
    disk = tmp_path / "disk"
    _mount_small_disk(disk)
    try:
        await _full_disk(disk)
    finally:
        os.system(f"umount {disk}")


async def _full_disk(disk: Path) -> None:
    ballast = disk / "ballast"
    ballast.write_bytes(b"\0" * 512 * 1024)
    db = disk / "s.db"
    store = await open_store(db)
    # A run whose runner is gone, for `loopdeck runs` to try (and fail) to mark crashed.
    await store.execute(
        "INSERT INTO runs (run_id, env, state, started_at, pid, host)"
        " VALUES ('gone', 'harness', 'deciding', '2026-01-01T00:00:00+00:00', ?, ?)",
        (2**22 + 1, this_host()),
    )
    big = 10**9
    prepared, rec = prepare(
        HARNESS, "poll", max_turns=big, max_tool_calls=big, max_tokens=big, max_cost=big,
        deadline=3600,
    )  # fmt: skip
    writer = EventWriter(store)
    recorded = RecordedRun(store, prepared.runtime, writer)
    try:
        task = asyncio.create_task(recorded.run())
        await until(lambda: rec.kinds("recording_held"), timeout=300)
        held = rec.kinds("recording_held")[0]
        assert held.cause == "disk full" and held.spill is not None
        assert disk not in Path(held.spill).parents and Path(held.spill).exists()
        # Readers read a full store.
        listed = await asyncio.to_thread(loopdeck, "runs", "--json", db=db)
        assert listed.returncode == 0, listed.stderr
        assert "Traceback" not in listed.stderr
        assert {r["run_id"] for r in json.loads(listed.stdout)} >= {"gone"}
        prepared.runtime.kill(by="test")
        await until(lambda: rec.kinds("run_stopped") and writer.outage is not None)
        freed = time.monotonic()
        ballast.unlink()
        await until(lambda: writer.outage is None)
        recovered_s = time.monotonic() - freed
        outcome = await task
        rows = await store.fetchall(
            "SELECT seq, kind FROM events WHERE run_id = ? ORDER BY seq",
            (prepared.runtime.config.run_id,),
        )
        run = await queries.run_row(store, prepared.runtime.config.run_id)
    finally:
        prepared.cleanup()
        await store.close()
    emitted = rec.events[-1].seq
    print(f"emitted {emitted}, in store {len(rows)}, recovered {recovered_s:.2f} s after freeing")
    assert outcome.stop_reason is StopReason.KILLED and recorded.persist_error is None
    assert [row[0] for row in rows] == list(range(1, emitted + 1))  # nothing lost, once each
    kinds = [row[1] for row in rows]
    assert kinds.count("run_stopped") == 1 and "recording_held" in kinds
    after_hold = kinds[kinds.index("recording_held") :]
    assert "model_called" not in after_hold and "tool_finished" not in after_hold
    assert run is not None and run["stop_reason"] == "killed"
    assert not Path(held.spill).exists()
    assert any("disk full" in line for line in outcome.recording_held)


def test_the_console_and_the_summary_say_the_run_holds_for_its_store() -> None:
    from io import StringIO

    from rich.console import Console

    from loopdeck.cli.summary import print_summary
    from loopdeck.core.events import RecordingHeld, RecordingResumed
    from loopdeck.core.outcome import RunOutcome
    from loopdeck.core.states import RunState
    from loopdeck.operator.runview import RunView
    from loopdeck.operator.transcript import Transcript

    since = _now()
    held = RecordingHeld(
        run_id="r1", cause="disk full", since=since, detail="d", spill="/x/s.jsonl", bound_s=120
    )
    view, transcript = RunView(), Transcript()
    view.apply(held)
    transcript.apply(held)
    shown = f"disk full since {since.astimezone():%H:%M:%S}, spilling to /x/s.jsonl"
    assert view.store_outage == shown and shown in run_waits.waiting_for(view)
    assert shown in transcript.entries[-1].title
    view.apply(RecordingResumed(run_id="r1", cause="disk full", held_s=2.5))
    assert view.store_outage == "" and "disk full: held 2.5 s, resumed" in view.notes
    outcome = RunOutcome(
        run_id="r1", env="e", script=None, model="m", mode="rounds", state=RunState.STOPPED,
        stop_reason=StopReason.POLICY_BLOCK, detail="disk full for 120 s", rounds=1,
        model_calls=0, tool_calls=0, tokens=0, cost_usd=0.0, cost_unknown_calls=0,
        elapsed_s=0.0, findings=[], recording_held=["disk full since 21:00:00: held 120.0 s"],
    )  # fmt: skip
    out = StringIO()
    print_summary(outcome, Console(file=out, width=200))
    assert "store disk full since 21:00:00: held 120.0 s" in out.getvalue()


@pytest.mark.slow
async def test_the_cli_on_a_full_disk_prints_its_summary_naming_it(tmp_path) -> None:
    """Then `loopdeck runs` reads the full store, and once there is room again writes the
    spilled stop into it."""
    disk = tmp_path / "disk"
    _mount_small_disk(disk)
    db = disk / "s.db"
    try:
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * 256 * 1024)
        big = "1000000000"
        done = await asyncio.to_thread(
            loopdeck, "run", str(HARNESS), "--script", "poll", "--headless",
            "--max-turns", big, "--max-tool-calls", big, "--max-tokens", big,
            "--max-cost", big, "--deadline", "3600", "--set", "store_hold_s=1",
            db=db, timeout=300,
        )  # fmt: skip
        full = await asyncio.to_thread(loopdeck, "runs", "--json", db=db)
        ballast.unlink()
        again = await asyncio.to_thread(loopdeck, "runs", "--json", db=db)
    finally:
        os.system(f"umount {disk}")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "policy_block — disk full for 1 s" in " ".join(done.stdout.split())
    assert "store disk full since" in done.stdout
    spilled = done.stderr.split("the unsaved events are in ")[1].split(":")[0]
    assert str(disk) not in spilled
    assert full.returncode == 0 and "Traceback" not in full.stderr, full.stderr
    assert "kept for later" in full.stderr  # the store cannot take the spill yet
    # The reader's crash mark is small: a full disk may take it (it is undone below) or not.
    assert [run["stop_reason"] for run in json.loads(full.stdout)] in ([None], ["crashed"])
    assert again.returncode == 0 and "brought back" in again.stderr, again.stderr
    assert [run["stop_reason"] for run in json.loads(again.stdout)] == ["policy_block"]
    assert not Path(spilled).exists()


@pytest.mark.slow
async def test_a_runaway_holds_through_a_postgresql_outage_and_loses_nothing(monkeypatch) -> None:
    from conftest import fresh_pg_database, pg_cluster

    url = fresh_pg_database(monkeypatch)
    cluster = pg_cluster()
    store = await open_store(url)
    big = 10**9
    prepared, rec = prepare(
        HARNESS, "poll", max_turns=big, max_tool_calls=big, max_tokens=big, max_cost=big,
        deadline=3600,
    )  # fmt: skip
    writer = EventWriter(store)
    try:
        task = asyncio.create_task(RecordedRun(store, prepared.runtime, writer).run())
        await until(lambda: len(rec.kinds("tool_finished")) >= 50)
        await asyncio.to_thread(cluster.stop_server)
        try:
            await until(lambda: rec.kinds("recording_held"))
            assert rec.kinds("recording_held")[0].cause == "unreachable"
        finally:
            await asyncio.to_thread(cluster.start_server)
        started = time.monotonic()
        await until(lambda: rec.kinds("recording_resumed"))
        resumed_s = time.monotonic() - started
        await until(lambda: len(rec.kinds("tool_finished")) >= 100)  # the run goes on
        prepared.runtime.kill(by="test")
        outcome = await task
        rows = await store.fetchall(
            "SELECT seq, kind FROM events WHERE run_id = ? ORDER BY seq",
            (prepared.runtime.config.run_id,),
        )
    finally:
        prepared.cleanup()
        await store.close()
    emitted = rec.events[-1].seq
    print(f"emitted {emitted}, in store {len(rows)}, resumed {resumed_s:.2f} s after the start")
    assert outcome.stop_reason is StopReason.KILLED
    assert [row[0] for row in rows] == list(range(1, emitted + 1))  # nothing lost, once each
    kinds = [row[1] for row in rows]
    held, resumed = kinds.index("recording_held"), kinds.index("recording_resumed")
    assert not {"model_called", "tool_finished"} & set(kinds[held:resumed])


async def test_a_runner_recovering_brings_back_what_another_runner_spilled(tmp_path) -> None:
    db = tmp_path / "s.db"
    store = await open_store(db)
    switch = _Switch(store)

    def down_once_the_write_runs(event: Any) -> None:
        if getattr(event, "kind", "") == "state_changed" and event.target.value == "executing":
            switch.down = True

    first, first_rec = prepare(HARNESS, "note")  # leaves before the store is back: a spill
    first.runtime.bus.subscribe(down_once_the_write_runs)
    writer = EventWriter(store)
    writer.close_retry_s = 0.0
    try:
        gone = RecordedRun(store, first.runtime, writer)
        await gone.run()
    finally:
        first.cleanup()
    assert gone.persist_error is not None
    second, second_rec = prepare(HARNESS, "note")  # in the same outage; it holds, then goes on
    recorded = RecordedRun(store, second.runtime, EventWriter(store))
    try:
        task = asyncio.create_task(recorded.run())
        await until(lambda: second_rec.kinds("recording_held"))
        switch.down = False
        await task
        rows = await store.fetchall(
            "SELECT seq FROM events WHERE run_id = ? ORDER BY seq", (first.runtime.config.run_id,)
        )
    finally:
        second.cleanup()
        await store.close()
    assert [row[0] for row in rows] == list(range(1, first_rec.events[-1].seq + 1))
    assert any("brought back" in note for note in recorded.notes)


async def test_an_approval_waits_out_the_outage_before_it_is_asked(tmp_path) -> None:
    """`--approve wait` and the console flush the pending row first: a store that cannot take
    it for now is waited for (the run holds), never a crash."""
    from loopdeck.store.approver import flush_when_available

    store = FlakyStore(tmp_path / "s.db", failures=2, cause=StoreUnavailable.LOCKED)
    writer = EventWriter(store)
    writer(OperatorCommand(run_id="r1", seq=1, command="pause", by="t"))
    writer.start()
    try:
        await asyncio.wait_for(flush_when_available(writer), 60)
    finally:
        await writer.close()
    assert [row[1] for row in store.events] == [1] and store.attempts == 3


async def test_a_spill_another_user_could_have_written_is_never_brought_back(
    tmp_path, monkeypatch
) -> None:
    from loopdeck.store.spill import store_key

    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    db = tmp_path / "s.db"
    await (await open_store(db)).close()
    folder = tmp_path / "run" / "loopdeck-spill"
    folder.mkdir(parents=True)
    event = OperatorCommand(run_id="r1", seq=1, command="pause", by="mallory")
    header = {"format": "loopdeck-spill", "store": store_key(db), "run_id": "r1"}
    (folder / "unsaved-r1.jsonl").write_text(f"{json.dumps(header)}\n{event.model_dump_json()}\n")
    os.chown(folder, 12345, 12345)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    store = await open_store(db)
    try:
        rows = await store.fetchall("SELECT seq FROM events")
    finally:
        await store.close()
    assert rows == [] and store.notes == [] and (folder / "unsaved-r1.jsonl").exists()


async def test_the_console_header_says_the_run_holds_for_its_store() -> None:
    from console_helpers import console_app, run_screen, wait_until

    from loopdeck.core.approvals import AutoApprover
    from loopdeck.tui.panels import RunHeader

    app = console_app(HARNESS, "note", approver=AutoApprover())
    journal = FakeJournal(down=True)
    app.prepared.runtime.journal = journal  # type: ignore[union-attr]
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: run_screen(app) is not None)
        screen = run_screen(app)
        assert screen is not None

        def header() -> str:
            return str(screen.query_one(RunHeader).render())

        await wait_until(pilot, lambda: "store unreachable since" in header())
        assert "retrying" in header()
        from loopdeck.operator import run_loop

        run_loop.call(journal.come_back)  # the run waits for it on the runs' own loop
        await wait_until(pilot, lambda: screen.outcome is not None)
        assert "store unreachable" not in header()
