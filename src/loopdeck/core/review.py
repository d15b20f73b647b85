"""The review step: a deterministic goal check over env snapshots, never the transcript."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

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
