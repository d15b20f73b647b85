"""The cap a fleet row shows: the one nearest its limit among those a run spends, read from
the budget event's (used, limit) pairs as the runs row keeps them (`store/feed.py`)."""

from __future__ import annotations

import math
from typing import Any

from loopdeck.caps import Cap


def closest_budget(usage: dict[str, Any]) -> tuple[str, float, float | None]:
    """The cap nearest its limit, its fraction, and the agent seconds left to reach it at the
    run's average rate so far (None when nothing is being spent). Only the caps a run spends
    (`Cap.burnt`): rounds and corrections are counted steps, not spent, as the budget pause
    has them (`BudgetLedger.crossed`): every run's first round read "rounds 33%", above what
    it had spent. A cap is read only as (used, limit) with a positive limit: a missing or
    zero cap, or a value that is not a number, is left out, never a fraction of anything."""
    agent_s = _spent(usage.get(Cap.DEADLINE))[0]
    best, best_fraction, projected = "", 0.0, None
    for cap in Cap:
        if not cap.burnt:
            continue
        used, limit = _spent(usage.get(cap))
        if limit <= 0:
            continue
        fraction = used / limit
        if fraction >= best_fraction and (used or cap is Cap.DEADLINE):
            best, best_fraction = f"{cap.label} {fraction:.0%}", fraction
            rate = used / agent_s if agent_s > 0 else 0.0
            projected = (limit - used) / rate if rate > 0 else None
    return best, best_fraction, projected


def _spent(pair: Any) -> tuple[float, float]:
    """A cap's (used, limit) as the budget event has it; (0, 0) when it is not one."""
    try:
        used, limit = (float(x) for x in pair)
    except (TypeError, ValueError):
        return 0.0, 0.0
    if not (math.isfinite(used) and math.isfinite(limit)) or used < 0:
        return 0.0, 0.0
    return used, limit
