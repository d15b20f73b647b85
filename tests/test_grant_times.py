"""A grant's expiry in the console (the Grants panel, `G`'s dialog) is a time of day on the
operator's clock, as every other time the console shows (`transcript.clock_text`); the event
holds it in UTC."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from loopdeck.core.events import GrantGiven
from loopdeck.operator.grant_book import GrantBook


@pytest.fixture
def far_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local zone five and a half hours ahead of UTC."""
    monkeypatch.setenv("TZ", "IST-5:30")  # POSIX: no tz database needed
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_grants_expiry_is_said_on_the_local_clock(far_zone: None) -> None:
    until = datetime(2026, 12, 5, 9, 30, 0, tzinfo=UTC)
    book = GrantBook()
    book.take(
        GrantGiven(
            run_id="r1", grant_id="g1", call_id="c1", tool="write_file", scope="tool",
            expires_at=until, by="console",
        )
    )  # fmt: skip
    (row,) = book.of_run("r1")
    assert row.rule.endswith(", until 15:00:00"), row.rule  # 09:30 UTC in Kolkata
