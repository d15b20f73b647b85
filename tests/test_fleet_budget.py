"""The fleet's "closest budget" (issue 38): the cap a run has spent the most of, in the cap's
own terms. Rounds are counted steps, not spent (every run's first round read "rounds 33%",
above all it had spent); a cap with no positive limit, or a value that is not a number, is
never a fraction of anything."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES

from loopdeck.cli import main
from loopdeck.operator.fleet import Fleet, closest_budget
from loopdeck.store.opening import open_store

# As the budget event of a run in its first round has it: each cap's (used, limit).
FIRST_ROUND = {
    "turns": (4.0, 30.0),
    "tool_calls": (3.0, 40.0),
    "tokens": (2241.0, 60000.0),
    "cost_usd": (0.002311, 0.5),
    "deadline_s": (0.24, 120.0),
    "rounds": (1.0, 3.0),
    "corrections": (0.0, 2.0),
}


def test_the_closest_budget_is_a_spent_cap_never_the_rounds() -> None:
    best, fraction, projected = closest_budget(FIRST_ROUND)
    assert (best, round(fraction, 3)) == ("turns 13%", 0.133)
    assert projected is not None and projected > 0  # 26 turns left at its rate so far
    last_round = FIRST_ROUND | {"rounds": (3.0, 3.0), "corrections": (2.0, 2.0)}
    assert closest_budget(last_round)[0] == "turns 13%"


@pytest.mark.parametrize(
    "broken",
    [(5.0, 0.0), (5.0, -1.0), ("a", 1.0), (math.nan, 1.0), (math.inf, 1.0), (-1.0, 1.0),
     None, 3.0, (1.0,)],
    ids=["zero cap", "negative cap", "text", "nan", "inf", "negative use", "null", "a number",
         "one value"],
)  # fmt: skip
def test_a_cap_that_is_not_a_used_and_a_limit_is_left_out(broken: Any) -> None:
    usage = {"turns": (2.0, 20.0), "cost_usd": broken}
    assert closest_budget(usage)[0] == "turns 10%"


def test_past_its_cap_is_said_as_it_is() -> None:
    """A run the cost cap stopped after a turn that went over: 120 %, not hidden."""
    usage = {"turns": (1.0, 20.0), "cost_usd": (0.6, 0.5)}
    assert closest_budget(usage)[:2] == ("cost 120%", pytest.approx(1.2))


def test_the_time_cap_is_the_closest_before_anything_is_spent() -> None:
    usage = {"turns": (0.0, 20.0), "deadline_s": (30.0, 120.0), "rounds": (1.0, 3.0)}
    best, fraction, projected = closest_budget(usage)
    assert (best, fraction, projected) == ("time 25%", 0.25, 90.0)


async def _fleet(db: Path) -> Fleet:
    store = await open_store(db)
    try:
        fleet = Fleet()
        await fleet.refresh(store)
        return fleet
    finally:
        await store.close()


def test_the_fleet_shows_what_sample_runs_spent(tmp_path: Path) -> None:
    """Two sample runs recorded as `loopdeck run` records them: each row's closest budget is
    the cap it spent the most of (turns), never its rounds (wrong-guess stalls in its second
    round of three: that read "rounds 33%")."""
    db = tmp_path / "s.db"
    runs = (("order_support", "solve", "orders01"), ("service_outage", "wrong-guess", "outage01"))
    for env, script, run_id in runs:
        args = ["run", str(SAMPLES / env), "--script", script, "--headless", "--approve"]
        main([*args, "auto", "--db", str(db), "--run-id", run_id])
    fleet = asyncio.run(_fleet(db))
    assert fleet.rows["orders01"].closest == "turns 20%"  # 4 of 20 turns
    assert fleet.rows["outage01"].stop_reason == "stalled"
    assert fleet.rows["outage01"].closest == "turns 27%"  # 8 of 30 turns


@pytest.mark.parametrize(
    ("state", "placement", "pending", "paused", "spending"),
    [
        ("executing", "", 0, False, True),
        ("executing", "held", 0, False, True),
        ("awaiting_approval", "", 1, False, False),  # its agent clock held for the operator
        ("awaiting_approval", "parked", 1, False, False),
        ("", "queued", 0, False, False),
        ("executing", "", 0, True, False),
        ("stopped", "", 0, False, False),
    ],
)
def test_a_cap_is_projected_only_for_a_run_that_spends(
    state: str, placement: str, pending: int, paused: bool, spending: bool
) -> None:
    """A parked run showed "turns 13% · cap in 0:00:00": no cap comes to a run that waits."""
    from loopdeck.operator.fleet import FleetRow

    row = FleetRow("r", "e", "s", "m", state, None, None, pending=pending, paused=paused,
                   placement=placement)  # fmt: skip
    assert row.spending is spending
