"""The settings of one run, fixed before it starts."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from loopdeck.core.budgets import Budget


class RunConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    env: str
    script: str | None = None
    model: str
    goal: str
    mode: Literal["rounds", "react"] = "rounds"
    budget: Budget = Field(default_factory=Budget)
    approval_ttl_s: float = 300.0
    pause_at: float | None = None
    # How long a detected loop waits for the operator's say before the guard acts alone.
    loop_answer_s: float = 60.0
    model_timeout_s: float = 60.0
    model_backoff_s: float = 0.5
    max_consecutive_tool_failures: int = 3
    # How long env code waits for a call it abandoned (timed out, killed) before the run stops.
    env_stray_wait_s: float = 10.0
    # How long the run holds while its store cannot take writes before it stops (policy_block)
    # rather than act unrecorded.
    store_hold_s: float = 120.0
    examples: list[str] = Field(default_factory=list)
    # A workspace change no approved call explains stops the run (`policy_block`): true when
    # writes are decided (`--approve deny|wait`, an operator attached); under `auto` it is
    # recorded and shown.
    stop_on_unrequested: bool = True
