"""The review step: a deterministic goal check over env snapshots, never the transcript."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from loopdeck.core.control import StopRun
from loopdeck.core.states import StopReason

VerdictKind = Literal["pass", "fail", "stalled"]


class Verdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: VerdictKind
    reasons: tuple[str, ...] = ()


def review(
    before: dict[str, Any],
    after: dict[str, Any],
    unmet: Callable[[dict[str, Any]], list[str]],
) -> Verdict:
    reasons = unmet(after)
    if not reasons:
        return Verdict(kind="pass")
    if after == before:
        return Verdict(kind="stalled", reasons=("no state change this round", *reasons))
    return Verdict(kind="fail", reasons=tuple(reasons))


def findings_or_stop(verdict: Verdict) -> list[str]:
    """A round's verdict: the run stops on a pass (`goal_met`) or a stall; else its findings,
    for the agent's next round."""
    if verdict.kind == "pass":
        raise StopRun(StopReason.GOAL_MET, "the goal check passed")
    if verdict.kind == "stalled":
        raise StopRun(StopReason.STALLED, "; ".join(verdict.reasons))
    return list(verdict.reasons)
