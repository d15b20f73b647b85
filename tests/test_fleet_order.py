"""The fleet's order kept by what changed (issue 43): after any run of changes it is the order
a full sort gives, and a refresh looks again only at the runs that changed."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from loopdeck.operator import fleet_order
from loopdeck.operator.fleet import Fleet, FleetRow
from loopdeck.operator.fleet_order import SORTS, Sort

NOW = datetime(2026, 1, 1, tzinfo=UTC)
STATES = ("deciding", "acting", "awaiting_approval", "stopped", "paused")


def _full_sort(rows: list[FleetRow], sort: Sort) -> list[str]:
    """The order as the fleet made it before it was kept: stable sorts of every run."""
    epoch = datetime.min.replace(tzinfo=UTC)
    ordered = sorted(rows, key=lambda row: row.started_at or epoch, reverse=True)
    if sort == "needs you":
        ordered.sort(key=lambda row: (not row.needs_operator, not row.live))
    else:
        if sort == "env":
            ordered.sort(key=lambda row: (row.env, row.script))
        ordered.sort(key=lambda row: not row.needs_operator)
    return [row.run_id for row in ordered]


def _row(rng: random.Random, i: int) -> FleetRow:
    row = FleetRow(
        run_id=f"r{i:03d}", env=rng.choice("abc"), script=rng.choice("xy"), model="m",
        state=rng.choice(STATES), stop_reason=None,
        # equal start times too: the rows' own order breaks the tie, as a stable sort does
        started_at=rng.choice([None, NOW - timedelta(seconds=rng.randrange(20))]),
    )  # fmt: skip
    _change(rng, row)
    return row


def _change(rng: random.Random, row: FleetRow) -> None:
    row.state = rng.choice(STATES)
    row.pending = rng.choice([0, 0, 1, 2])
    row.questions = rng.randrange(row.pending + 1)
    row.paused = rng.random() < 0.2
    row.env = rng.choice("abc") if rng.random() < 0.3 else row.env
    if rng.random() < 0.2:
        row.started_at = NOW - timedelta(seconds=rng.randrange(20))


@pytest.mark.parametrize("seed", range(6))
def test_the_kept_order_is_the_full_sort_after_any_changes(seed: int) -> None:
    rng = random.Random(seed)
    fleet = Fleet(rows={row.run_id: row for row in (_row(rng, i) for i in range(60))})
    for step in range(200):
        action = rng.random()
        if action < 0.6:  # a run changes, as the feed changes it
            row = rng.choice(list(fleet.rows.values()))
            _change(rng, row)
            fleet.touch(row.run_id)
        elif action < 0.8:  # a new run, or one replaced by a new row object
            row = _row(rng, rng.randrange(90))
            fleet.rows[row.run_id] = row
        else:  # taken out
            del fleet.rows[rng.choice(list(fleet.rows))]
        sort: Sort = rng.choice(list(SORTS))
        order = fleet.ordered(sort)
        expected = _full_sort(list(fleet.rows.values()), sort)
        assert [row.run_id for row in order] == expected, (seed, step, sort)
        assert order.leading == sum(1 for row in order if row.needs_operator)
        for at, run_id in enumerate(expected):
            assert order.index_of(run_id) == at
        rows = fleet.rows.values()
        assert fleet.waiting == sum(row.pending for row in rows)
        assert fleet.questions == sum(row.questions for row in rows)
        assert fleet.waiting_by_run == {row.run_id: row.pending for row in rows if row.pending}


def test_a_refresh_looks_again_only_at_the_runs_that_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(7)
    fleet = Fleet(rows={row.run_id: row for row in (_row(rng, i) for i in range(3000))})
    fleet.ordered("needs you")
    keyed: list[str] = []
    sort_key = fleet_order.sort_key

    def counted(row: Any, sort: Sort, seq: int) -> Any:
        keyed.append(row.run_id)
        return sort_key(row, sort, seq)

    monkeypatch.setattr(fleet_order, "sort_key", counted)
    for run_id in ("r010", "r500", "r999"):
        _change(rng, fleet.rows[run_id])
        fleet.touch(run_id)
    order = fleet.ordered("needs you")
    assert sorted(keyed) == ["r010", "r500", "r999"]
    assert [row.run_id for row in order] == _full_sort(list(fleet.rows.values()), "needs you")
    keyed.clear()
    fleet.ordered("needs you")
    assert keyed == []  # nothing changed: nothing looked at
