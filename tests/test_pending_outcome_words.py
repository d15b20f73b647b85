"""`pending`'s line for a write whose outcome is unknown says so once, with why when there is
more to say (it read `c1 bump: outcome unknown (outcome_unknown)`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loopdeck.cli import decision_commands
from loopdeck.operator.records import PendingOutcome


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        ("outcome_unknown", "r1 c1 bump: outcome unknown  → loopdeck resolve r1 c1"),
        ("interrupted", "r1 c1 bump: outcome unknown (interrupted as it ran)  → loopdeck"),
        (None, "r1 c1 bump: outcome unknown (never recorded as ended: its run stopped first)  →"),
    ],
)
def test_an_unknown_outcome_is_said_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], outcome: Any, said: str
) -> None:
    item = PendingOutcome("r1", "c1", "bump", {"by": 3}, "mine/solve", False, outcome=outcome)

    async def unknown(store: object, run_id: str | None = None) -> list[PendingOutcome]:
        return [item]

    monkeypatch.setattr(decision_commands.records, "unknown_outcomes", unknown)
    assert asyncio.run(decision_commands.print_unknown(object())) == [item]  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert err.startswith(said), err
    assert err.count("outcome") == 1 and err.endswith("applied|not-applied\n"), err
