"""PostgreSQL appends a large batch in binary COPY (`store/pg_connection.py`): the column types
it declares are the server's, and what lands is exactly the text a small batch's INSERT
stores, so the hash chain links the stored bytes either way."""

from __future__ import annotations

import psycopg
import pytest
from conftest import fresh_pg_database

from loopdeck.core.events import CallStatus, Event, StateChanged, ToolFinished
from loopdeck.core.states import RunState
from loopdeck.store.opening import open_store
from loopdeck.store.pg_connection import COPY_FROM, COPY_TYPES
from loopdeck.store.verification import verify_run
from loopdeck.store.writer import EventWriter

pytestmark = pytest.mark.slow  # a PostgreSQL cluster, as the store's other PostgreSQL tests

# Text COPY's text format escapes (tab, newline, backslash), JSON's escapes, a lone
# surrogate (escaped in the body, never fatal), and text beyond ASCII.
HOSTILE = ["a\tb\nc\\d\r", '"quoted" \\N', "\ud800 lone", "é 漢字 🙂", "\x00 nul", ""]


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return fresh_pg_database(monkeypatch)


async def test_the_copied_columns_types_are_the_servers(url: str) -> None:
    await (await open_store(url)).close()  # the schema
    with psycopg.connect(url, autocommit=True) as conn:
        for table, types in COPY_TYPES.items():
            rows = conn.execute(
                "SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_attribute a"
                " WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
                (table,),
            ).fetchall()
            declared = {"text": "text", "int4": "integer"}
            assert {name: declared[kind] for name, kind in types.items()} == dict(rows)


def _results(run_id: str, first: int, count: int) -> list[Event]:
    return [
        ToolFinished(
            run_id=run_id, seq=first + n, call_id=f"c{n}", tool="poll",
            status=CallStatus.EXECUTED, result={"text": HOSTILE[n % len(HOSTILE)], "n": n},
            duration_ms=0.5,
        )
        for n in range(count)
    ]  # fmt: skip


async def test_a_copied_batch_stores_what_an_inserted_one_does_and_verifies(url: str) -> None:
    store = await open_store(url)
    try:
        writer = EventWriter(store)
        start = StateChanged(run_id="r", seq=1, source=RunState.READY, target=RunState.DECIDING)
        small = _results("r", 2, COPY_FROM - 1)  # one multi-row INSERT
        large = _results("r", 2 + len(small), 3 * COPY_FROM)  # binary COPY
        for event in [start, *small]:
            writer(event)
        await writer.flush()
        for event in large:
            writer(event)
        await writer.flush()
        sent = [start, *small, *large]
        rows = await store.fetchall(
            "SELECT seq, at, body FROM events WHERE run_id = ? ORDER BY seq", ("r",)
        )
        assert [row["seq"] for row in rows] == [event.seq for event in sent]
        assert [row["body"] for row in rows] == [event.as_json() for event in sent]
        assert [row["at"] for row in rows] == [event.at.isoformat() for event in sent]
        proof = await verify_run(store, "r")
        assert proof.broken is None and proof.verified == len(sent)
    finally:
        await store.close()
