"""What the gateway's tests share: a gateway run made in-process on a folder of the test's (its
agent `tests/gateway_agent.py`, in one of the three formats or in `door` mode, where the test
drives the gateway itself), an approver the test decides for, and waiting on a condition."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conftest import Recorder

from loopdeck.cli.gateway_target import GatewayTarget
from loopdeck.core.approvals import ApprovalDecision, ApprovalRequest, Approver, AutoApprover
from loopdeck.core.events import EventBus
from loopdeck.core.outcome import RunOutcome
from loopdeck.operator.launch import PreparedRun, RunOptions, prepare_run

AGENT = str(Path(__file__).with_name("gateway_agent.py"))
WAIT_S = 60.0  # a bound on a condition a loaded machine reaches in well under a second


async def until(what: str, condition: Callable[[], Any], bound_s: float = WAIT_S) -> Any:
    """`condition()` once it is truthy (checked as the loop turns); fails naming `what`."""
    loop = asyncio.get_running_loop()
    end = loop.time() + bound_s
    while not (found := condition()):
        assert loop.time() < end, f"not within {bound_s:g} s: {what}"
        await asyncio.sleep(0.02)
    return found


def check_for(name: str) -> list[str]:
    """A goal check: met when `name` exists in the folder."""
    code = f"import pathlib, sys; sys.exit(0 if pathlib.Path({name!r}).exists() else 1)"
    return [sys.executable, "-c", code]


@dataclass
class Decider:
    """An approver whose decisions the test makes: `decide(request)` answers at once (None:
    the request waits until the test answers it with `answer`)."""

    decide: Callable[[ApprovalRequest], ApprovalDecision | None] = lambda request: None
    asked: list[ApprovalRequest] = field(default_factory=list)
    waiting: dict[str, asyncio.Future[ApprovalDecision]] = field(default_factory=dict)

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        if (decided := self.decide(request)) is not None:
            return decided
        future = asyncio.get_running_loop().create_future()
        self.waiting[request.call_id] = future
        return await future

    def answer(self, call_id: str, **decision: Any) -> None:
        self.waiting.pop(call_id).set_result(ApprovalDecision(call_id=call_id, **decision))


def approve(request: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(call_id=request.call_id, approved=True, by="test")


@dataclass
class GatewayRun:
    """A gateway run on `workdir` against `upstream` (a loopback's URL and model)."""

    workdir: Path
    command: list[str]
    model: str
    api_base: str
    approver: Approver = field(default_factory=AutoApprover)
    check: list[str] | None = None
    tools: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)
    approve: str | None = None  # `--approve`: `deny` or `wait` guard the run
    policy: Path | None = None  # `--policy FILE`
    recorder: Recorder = field(default_factory=Recorder)
    prepared: PreparedRun | None = None
    task: asyncio.Task[RunOutcome] | None = None

    def start(self) -> None:
        target = GatewayTarget(
            goal="the test's goal", workdir=self.workdir, command=self.command, check=self.check,
            env=self.env, model=self.model, api_base=self.api_base, tools=self.tools,
        )  # fmt: skip
        bus = EventBus()
        bus.subscribe(self.recorder)
        options = RunOptions(
            env=target.env_name,
            acp=target,
            budget_overrides=self.budget,  # type: ignore[attr-defined]
            approve=self.approve,  # type: ignore[arg-type]
            policy=self.policy,
        )
        self.prepared = prepare_run(options, approver=self.approver, bus=bus)
        self.task = asyncio.ensure_future(self.prepared.runtime.run())

    @property
    def runtime(self) -> Any:
        assert self.prepared is not None
        return self.prepared.runtime

    async def outcome(self) -> RunOutcome:
        assert self.task is not None and self.prepared is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self.task), WAIT_S)
        finally:
            if self.task.done():
                self.prepared.cleanup()

    def events(self, kind: type) -> list[Any]:
        return [event for event in self.recorder.events if isinstance(event, kind)]


@dataclass
class Door:
    """What a `door`-mode agent was given, and how the test lets it exit."""

    path: Path
    told: dict[str, Any]

    def end(self, status: int = 0) -> None:
        Path(f"{self.path}.done").write_text(str(status))

    def openai(self) -> Any:
        from openai import AsyncOpenAI

        return AsyncOpenAI(
            base_url=self.told["OPENAI_BASE_URL"], api_key=self.told["OPENAI_API_KEY"],
            max_retries=0,
        )  # fmt: skip

    @property
    def messages_url(self) -> str:
        return str(self.told["ANTHROPIC_BASE_URL"]) + "/v1/messages"

    @property
    def anthropic_headers(self) -> dict[str, str]:
        return {"x-api-key": str(self.told["ANTHROPIC_API_KEY"]), "anthropic-version": "2023-06-01"}


def door_command(path: Path) -> list[str]:
    return [sys.executable, AGENT, "door", str(path)]


async def door_of(path: Path) -> Door:
    await until("the agent told its door", path.exists)
    return Door(path, json.loads(path.read_text()))


@contextlib.asynccontextmanager
async def door_run(run: GatewayRun, path: Path) -> Any:
    """The run started, its agent's door read; at the end the agent let go and the run over."""
    run.start()
    door = await door_of(path)
    try:
        yield door
    finally:
        door.end()


Probe = Callable[[Door], Awaitable[Any]]
