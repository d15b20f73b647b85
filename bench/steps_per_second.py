"""Supervised steps per second: one model turn plus one tool call, with a zero-latency model.

Prints the full loop (guard, review, events on) next to the same loop with guard, review and
events switched off, and the same full loop through LiteLLM's custom-provider path.

    .venv/bin/python bench/steps_per_second.py [STEPS]
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from loopdeck import tuning
from loopdeck.core import AutoApprover, Budget, Environment, RunConfig, Runtime, tool
from loopdeck.core.model import ModelReply, ModelRequest, RawToolCall
from loopdeck.core.review import Verdict


class StepArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    i: int


class NoopEnv(Environment):
    def snapshot(self) -> dict[str, Any]:
        return {"service": "up", "replicas": 3}

    def unmet(self, snapshot: dict[str, Any]) -> list[str]:
        return ["never met"]

    @tool(args=StepArgs)
    def step(self, args: StepArgs) -> dict[str, Any]:
        """Do nothing."""
        return {"i": args.i}


class ZeroLatencyModel:
    """Plans once, then calls step(i) with a fresh i every turn."""

    name = "zero-latency"

    def __init__(self) -> None:
        self.turn = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        if request.role == "planner":
            return ModelReply(model=self.name, content="1. Step forever.", prompt_tokens=1)
        self.turn += 1
        call = RawToolCall(id=f"t{self.turn}", name="step", arguments=json.dumps({"i": self.turn}))
        return ModelReply(model=self.name, tool_calls=[call], prompt_tokens=1, completion_tokens=1)


class AdmitAll:
    trips = 0

    def admit(self, key: object, exempt: bool = False) -> bool:
        return True


def runtime_for(steps: int, model: Any) -> Runtime:
    budget = Budget(
        max_turns=steps + 1,
        max_tool_calls=10**9,
        max_tokens=10**12,
        max_cost_usd=10**6,
        deadline_s=3600,
        max_rounds=1,
    )
    config = RunConfig(env="bench", model=model.name, goal="bench", budget=budget)
    return Runtime(config, NoopEnv(Path("."), {}), model, AutoApprover())


def bare(runtime: Runtime) -> Runtime:
    runtime.calls.guard = AdmitAll()  # type: ignore[assignment]
    runtime.emit = lambda make, *args, **fields: None  # type: ignore[method-assign]

    async def no_review(before: object) -> Verdict:
        return Verdict(kind="fail", reasons=("off",))

    runtime.review_round = no_review  # type: ignore[method-assign,assignment]
    return runtime


async def measure(runtime: Runtime, steps: int) -> float:
    start = time.perf_counter()
    outcome = await runtime.run()
    elapsed = time.perf_counter() - start
    assert outcome.tool_calls == steps, outcome
    return steps / elapsed


def main() -> None:
    tuning.for_headless()  # `loopdeck run --headless`'s process: tuned once LiteLLM is imported
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    full = asyncio.run(measure(runtime_for(steps, ZeroLatencyModel()), steps))
    off = asyncio.run(measure(bare(runtime_for(steps, ZeroLatencyModel())), steps))
    print(f"supervised steps/s (guard, review, events on):  {full:10.0f}  ({steps} steps)")
    print(f"same loop, guard/review/events switched off:    {off:10.0f}  ({steps} steps)")
    print(f"supervision overhead per step:                  {1e6 / full - 1e6 / off:10.1f} µs")

    from loopdeck.core.scenario import Script, ScriptTurn
    from loopdeck.llm.client import LiteLLMModel
    from loopdeck.llm.loader import litellm_module

    litellm_module()
    few = min(steps, 500)
    script = Script(
        planner=["1. Step."], executor=[ScriptTurn(tool="step", args={"i": 1}, repeat=True)]
    )
    runtime = runtime_for(few, LiteLLMModel("scripted", script=script))
    runtime.calls.guard = AdmitAll()  # the script repeats one call; keep it running
    rate = asyncio.run(measure(runtime, few))
    print(f"through LiteLLM's scripted provider (no guard): {rate:10.0f}  ({few} steps)")


if __name__ == "__main__":
    main()
