"""A PostgreSQL store outlives its server: restarted (`pg_ctl restart -m fast`) or stopped a
while, every connection (the main one, the listener, the heartbeat's) comes back by itself;
meanwhile statements raise StoreUnavailable, and readers (the fleet, an attached console)
say the store is unreachable, then read everything again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import fresh_pg_database, pg_cluster

from loopdeck.core.events import EventBus, RunStarted, StateChanged
from loopdeck.core.states import RunState
from loopdeck.operator.fleet import Fleet
from loopdeck.operator.store_link import StoreLink
from loopdeck.store.base import Store, StoreUnavailable
from loopdeck.store.liveness import Heartbeat, process_started, this_host
from loopdeck.store.opening import open_store
from loopdeck.store.writer import EventWriter

BOUND_S = 60.0  # how long a recovery may take before the test calls it missing


@pytest.fixture
def cluster() -> Iterator[Any]:
    """The session's cluster, running again at the end whatever the test did to it."""
    cluster = pg_cluster()
    yield cluster
    with psycopg.connect(cluster.url, connect_timeout=3) as conn:  # up, or started again
        conn.execute("SELECT 1")


@pytest.fixture
def url(monkeypatch) -> str:
    return fresh_pg_database(monkeypatch)


def _down(cluster: Any) -> None:
    cluster.stop_server()


async def _until(check: Any, what: str) -> None:
    """Wait for `check()` (async) to be true; a recovery that never comes fails the test."""
    end = time.monotonic() + BOUND_S
    while not await check():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.05)


async def _works(store: Store) -> bool:
    try:
        await store.execute("UPDATE meta SET value = value WHERE key = 'app'")
    except StoreUnavailable:
        return False
    return True


def _add_run(url: str, run_id: str, state: str = "awaiting_approval") -> None:
    """A run as its runner (this process) records it, with one write waiting."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO runs (run_id, env, script, model, state, started_at, pid, host,"
            " heartbeat_at, pid_started) VALUES (%s, 'e', 's', 'm', %s,"
            " '2026-01-01T00:00:00+00:00', %s, %s, %s, %s)",
            (run_id, state, os.getpid(), this_host(), time.time(), process_started(os.getpid())),
        )
        conn.execute(
            "INSERT INTO approvals (run_id, call_id, tool, args, requested_at, expires_at, state)"
            " VALUES (%s, 'c1', 'refund', '{}', '2026-01-01T00:00:00+00:00',"
            " '2999-01-01T00:00:00+00:00', 'pending')",
            (run_id,),
        )


async def test_a_store_outlives_a_restart_and_a_stop_of_its_server(cluster, url) -> None:
    store = await open_store(url)
    try:
        await asyncio.to_thread(cluster.restart)
        # A read after the restart works at once: the lost connection is read on again.
        assert (await store.fetchall("SELECT value FROM meta WHERE key = 'app'"))[0][0]
        await asyncio.to_thread(_down, cluster)
        try:
            for attempt in (
                store.execute("SELECT 1"),
                store.fetchall("SELECT 1"),
                _in_a_transaction(store),
            ):
                with pytest.raises(StoreUnavailable, match="server unreachable") as raised:
                    await attempt
                assert raised.value.cause == StoreUnavailable.UNREACHABLE
            before = await store.change_counter()
            await store.wait_for_change(0.1)  # waits its time out: never hangs, never raises
            assert await store.change_counter() > before  # while deaf, readers read again
        finally:
            await asyncio.to_thread(cluster.start_server)
        await _until(lambda: _works(store), "a write through the store after the server's return")
    finally:
        await store.close()


async def _in_a_transaction(store: Store) -> None:
    async with store.transaction("r1") as tx:
        await tx.execute("SELECT 1")


async def test_the_listener_hears_notifies_after_a_restart(cluster, url) -> None:
    store = await open_store(url)
    try:
        await asyncio.to_thread(cluster.restart)
        await _until(lambda: _works(store), "the store back after the restart")

        async def listening() -> bool:  # the counter holds still once the listener is back
            first = await store.change_counter()
            await asyncio.sleep(0.05)
            return await store.change_counter() == first

        await _until(listening, "the listener back")
        before = await store.change_counter()
        waiting = asyncio.create_task(store.wait_for_change(BOUND_S))
        await asyncio.sleep(0)
        with psycopg.connect(url, autocommit=True) as other:
            other.execute("SELECT pg_notify('loopdeck_changes', 'r1')")
        await waiting  # woken by the NOTIFY, or a silent listener waits the whole bound
        assert await store.change_counter() > before
    finally:
        await store.close()


async def test_a_heartbeat_beats_on_after_a_restart(cluster, url) -> None:
    store = await open_store(url)
    _add_run(url, "r1", state="executing")
    heartbeat = Heartbeat(store, "r1", interval_s=0.1)
    heartbeat.start()
    try:
        await asyncio.to_thread(cluster.restart)
        back = time.time()

        async def beaten() -> bool:
            try:
                with psycopg.connect(url, connect_timeout=3) as conn:
                    row = conn.execute("SELECT heartbeat_at FROM runs").fetchone()
            except psycopg.OperationalError:
                return False
            return row is not None and row[0] > back

        await _until(beaten, "a heartbeat after the restart")
    finally:
        heartbeat.stop()
        await store.close()


async def test_the_fleet_shows_the_outage_and_reads_every_run_again(cluster, url) -> None:
    store = await open_store(url)
    _add_run(url, "r1")
    fleet = Fleet()
    try:
        assert await fleet.refresh(store)
        assert fleet.rows["r1"].state == "awaiting_approval" and fleet.waiting == 1
        await asyncio.to_thread(_down, cluster)
        try:

            async def says_unreachable() -> bool:
                await fleet.refresh(store)
                return fleet.outage.text.startswith("store unreachable since")

            await _until(says_unreachable, "the fleet saying the store is unreachable")
            assert fleet.outage.text.endswith(", retrying")
            assert fleet.rows["r1"].state == "awaiting_approval"  # as last read, said stale
        finally:
            await asyncio.to_thread(cluster.start_server)
        with psycopg.connect(url) as conn:  # what happened while the fleet could not see
            conn.execute("UPDATE approvals SET state = 'withdrawn'")
            conn.execute("UPDATE runs SET state = 'stopped', stop_reason = 'killed'")

        async def recovered() -> bool:
            await fleet.refresh(store)
            await store.wait_for_change(0.1)
            row = fleet.rows["r1"]
            return not fleet.outage.text and row.state == "stopped" and not fleet.waiting

        await _until(recovered, "the fleet reading the run again")
        assert fleet.rows["r1"].stop_reason == "killed"
    finally:
        await store.close()


async def test_an_attached_console_says_the_store_is_unreachable_and_follows_on(
    cluster, url
) -> None:
    await (await open_store(url)).close()  # the schema, for the run's rows
    _add_run(url, "r1", state="executing")
    link = StoreLink(url, "r1")
    driving = asyncio.create_task(link.drive())
    try:
        await _until(lambda: _has(link.store is not None), "the link following")
        await asyncio.to_thread(_down, cluster)
        try:
            await _until(
                lambda: _has(link.store_outage.startswith("store unreachable since")),
                "the link saying the store is unreachable",
            )
            assert not driving.done()  # it waits the outage out
            link.kill(by="operator")  # given while the store cannot take it
        finally:
            await asyncio.to_thread(cluster.start_server)
        await _until(lambda: _has(not link.store_outage), "the link reading again")
        assert link.pending() and link.pending()[0].call_id == "c1"

        async def kill_sent() -> bool:
            with psycopg.connect(url) as conn:
                rows = conn.execute('SELECT command, "by" FROM commands').fetchall()
            return rows == [("kill", "operator")]

        await _until(kill_sent, "the kill given during the outage, sent once the store is back")
    finally:
        await link.close()
        await driving


async def _has(value: bool) -> bool:
    return value


class _CommitLostOnce:
    """A store whose next transaction commits, then reports its connection lost: what a
    COMMIT looks like when the server restarts as it answers."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.armed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    @contextlib.asynccontextmanager
    async def transaction(self, run_id: str | None = None, *, pipelined: bool = False) -> Any:
        async with self.store.transaction(run_id, pipelined=pipelined) as tx:
            yield tx
        if self.armed:
            self.armed = False
            raise StoreUnavailable(
                "server unreachable: server closed the connection unexpectedly",
                StoreUnavailable.UNREACHABLE,
            )


async def test_a_batch_that_landed_as_its_connection_was_lost_is_not_written_twice(url) -> None:
    store = await open_store(url)
    bus, writer = EventBus(), EventWriter(_CommitLostOnce(store))  # type: ignore[arg-type]
    bus.subscribe(writer)
    run_id = "r-landed"
    moves = [(RunState.READY, RunState.PLANNING), (RunState.PLANNING, RunState.DECIDING)]
    try:
        bus.publish(RunStarted(run_id=run_id, env="e", script="s", model="m", mode="rounds",
                               goal="g", budget={}))  # fmt: skip
        bus.publish(StateChanged(run_id=run_id, source=moves[0][0], target=moves[0][1]))
        with pytest.raises(StoreUnavailable):
            await writer.flush()
        bus.publish(StateChanged(run_id=run_id, source=moves[1][0], target=moves[1][1]))
        await writer.flush()  # the landed two are not inserted again: no clash, no double
        rows = await store.fetchall(
            "SELECT seq FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        )
        assert [row[0] for row in rows] == [1, 2, 3]
        assert writer.acknowledged_seq == 3 and writer.outage is None
    finally:
        await store.close()


@pytest.mark.slow
async def test_the_fleet_and_an_attached_run_say_so_on_screen(cluster, url) -> None:
    """What the operator sees: the fleet's header and the attached run's header name the
    outage while the server is down, and drop it once it is back."""
    from console_helpers import wait_until

    from loopdeck.tui.app import ConsoleStart, LoopdeckApp
    from loopdeck.tui.fleet_screen import FleetScreen
    from loopdeck.tui.panels import RunHeader
    from loopdeck.tui.run_screen import RunScreen

    await (await open_store(url)).close()
    _add_run(url, "r1", state="executing")
    fleet_app = LoopdeckApp(ConsoleStart.for_fleet(url))
    attached = LoopdeckApp(ConsoleStart.for_link(StoreLink(url, "r1")))
    async with (
        fleet_app.run_test(size=(160, 48)) as fleet_pilot,
        attached.run_test(size=(160, 48)) as run_pilot,
    ):
        await wait_until(fleet_pilot, lambda: isinstance(fleet_app.screen, FleetScreen))
        header = fleet_app.screen.query_one("#fleet-header")
        await wait_until(fleet_pilot, lambda: "1 run" in str(header.render()))
        # The run's screen, under the approval dialog its pending write opens.
        await wait_until(
            run_pilot, lambda: any(isinstance(s, RunScreen) for s in attached.screen_stack)
        )
        run_screen = next(s for s in attached.screen_stack if isinstance(s, RunScreen))
        run_header = run_screen.query_one(RunHeader)
        await asyncio.to_thread(_down, cluster)
        try:
            await wait_until(
                fleet_pilot, lambda: "store unreachable since" in str(header.render()), 30
            )
            await wait_until(
                run_pilot, lambda: "store unreachable since" in str(run_header.render()), 30
            )
        finally:
            await asyncio.to_thread(cluster.start_server)
        await wait_until(fleet_pilot, lambda: "unreachable" not in str(header.render()), 60)
        await wait_until(run_pilot, lambda: "unreachable" not in str(run_header.render()), 60)
