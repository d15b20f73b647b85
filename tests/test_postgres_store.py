"""What only the PostgreSQL store has to show: credentials kept out of sight, its schema
checks, NOTIFY waking a waiter, and events read back the same as they were written."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
from conftest import fresh_pg_database, pg_cluster
from store_helpers import last_json, loopdeck

from loopdeck.operator.links import load_events
from loopdeck.store import queries
from loopdeck.store.base import StoreError, default_db_path, redact
from loopdeck.store.opening import open_store


@pytest.fixture
def url(monkeypatch) -> str:
    return fresh_pg_database(monkeypatch)


def _with_password(url: str) -> str:
    cluster = pg_cluster()
    return url.replace(f"{cluster.user}@", f"{cluster.user}:{cluster.password}@")


@pytest.mark.slow
def test_a_password_in_the_url_is_used_but_never_printed_or_stored(url, monkeypatch) -> None:
    monkeypatch.delenv("PGPASSWORD")
    secret = pg_cluster().password
    full = _with_password(url)
    done = loopdeck("run", "service_outage", "--headless", "--json", db=full)
    assert done.returncode == 0, done.stderr
    assert secret not in done.stdout + done.stderr
    assert "watch: loopdeck attach" in done.stderr and redact(full) in done.stderr
    listed = loopdeck("runs", db=full)
    assert listed.returncode == 0 and secret not in listed.stdout + listed.stderr
    with psycopg.connect(full) as conn:
        for table in ("runs", "events", "approvals", "commands", "meta"):
            dump = json.dumps(conn.execute(f"SELECT * FROM {table}").fetchall(), default=str)
            assert secret not in dump
    wrong = loopdeck("runs", db=full.replace(secret, "not-the-password"))
    assert wrong.returncode == 2 and "password authentication failed" in wrong.stderr
    assert "not-the-password" not in wrong.stderr


def test_loopdeck_db_selects_postgresql(url, monkeypatch) -> None:
    monkeypatch.setenv("LOOPDECK_DB", url)
    assert default_db_path() == url


async def test_a_newer_schema_and_a_foreign_database_are_refused(url) -> None:
    store = await open_store(url)
    await store.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    await store.close()
    with pytest.raises(StoreError, match="schema version 99 is newer"):
        await open_store(url)
    with psycopg.connect(url) as conn:
        conn.execute("DROP TABLE meta")
    with pytest.raises(StoreError, match="not a loopdeck database"):
        await open_store(url)


async def test_attach_and_replay_need_a_store_and_never_create_one(url) -> None:
    with pytest.raises(StoreError, match="no loopdeck store"):
        await open_store(url, create=False)


async def test_a_decision_wakes_a_waiter_by_notify(url) -> None:
    """The runner's side waits on NOTIFY: the decision made through another connection wakes
    it (the counter moved), not the safety poll."""
    done = loopdeck("run", "service_outage", "--headless", "--json", db=url)
    run_id = last_json(done.stdout)["run_id"]
    waiter, decider = await open_store(url), await open_store(url)
    try:
        before = await waiter.change_counter()
        waiting = asyncio.create_task(waiter.wait_for_change(60))
        await asyncio.sleep(0)
        await queries.send_command(decider, run_id, "cancel", "test")
        await waiting
        assert await waiter.change_counter() > before
    finally:
        await waiter.close()
        await decider.close()


@pytest.mark.slow
async def test_export_and_replay_read_back_every_event_in_order(url) -> None:
    done = loopdeck("run", "order_support", "--headless", "--json", db=url)
    run_id = last_json(done.stdout)["run_id"]
    exported = [json.loads(line) for line in loopdeck("export", run_id, db=url).stdout.splitlines()]
    store = await open_store(url, create=False)
    try:
        replayed = await load_events(store, run_id)
    finally:
        await store.close()
    assert [e["seq"] for e in exported] == list(range(1, len(exported) + 1))
    assert [e.seq for e in replayed] == [e["seq"] for e in exported]
    assert [e.kind for e in replayed] == [e["kind"] for e in exported]
    assert exported[-1]["kind"] == "run_stopped"


@pytest.mark.slow
def test_a_service_file_supplies_the_connection(url, tmp_path, monkeypatch) -> None:
    cluster = pg_cluster()
    service = tmp_path / "pg_service.conf"
    service.write_text(
        f"[loopdeck]\nhost=127.0.0.1\nport={cluster.port}\nuser={cluster.user}\n"
        f"dbname={url.rsplit('/', 1)[1]}\npassword={cluster.password}\n"
    )
    monkeypatch.setenv("PGSERVICEFILE", str(service))
    monkeypatch.delenv("PGPASSWORD")
    done = loopdeck(
        "run", "service_outage", "--headless", "--json", db="postgresql:///?service=loopdeck"
    )
    assert done.returncode == 0, done.stderr
    assert last_json(done.stdout)["stop_reason"] == "goal_met"
    assert cluster.password not in done.stdout + done.stderr


async def test_a_transaction_open_does_not_hold_up_the_stores_other_statements(url) -> None:
    """A worker's runs commit side by side: while one transaction is open (a run's batch
    waiting on the server), the same store's other statements go on other connections, up
    to CONNECTIONS at once, each opened as needed."""
    from loopdeck.store.pg_connections import CONNECTIONS

    store = await open_store(url)
    mine = "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
    try:
        async with store.transaction("run-a") as tx:
            await tx.execute("SELECT 1")
            # Was queued behind the open transaction, on the store's one connection.
            assert (await asyncio.wait_for(store.fetchall("SELECT 2"), 60))[0][0] == 2
        release = asyncio.Event()
        inside = 0

        async def held() -> None:
            nonlocal inside
            async with store.transaction() as tx:
                await tx.execute("SELECT 1")
                inside += 1
                await release.wait()

        async def all_connections_taken() -> None:
            while inside < CONNECTIONS:
                await asyncio.sleep(0.01)

        holders = [asyncio.create_task(held()) for _ in range(CONNECTIONS + 2)]
        await asyncio.wait_for(all_connections_taken(), 60)
        counted = int((await _outside(url, mine))[0][0])
        assert inside == CONNECTIONS  # the others wait for a connection
        assert counted <= CONNECTIONS + 2  # the store's, its listener and this count's own
        release.set()
        await asyncio.wait_for(asyncio.gather(*holders), 60)
        assert inside == CONNECTIONS + 2
    finally:
        await store.close()


async def _outside(url: str, sql: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        return await (await conn.execute(sql)).fetchall()
