"""One prompt turn of loopdeck's scripted ACP agent: its steps played in order as ACP
messages to the client (`session/update`s, `session/request_permission`, `fs/*`), the
misbehaviours of real agents included.

A `tool` step is a tool call `call_N` (N counting across the session): started `pending`
(with `late_input`, as Claude Code starts it: a generic title and `rawInput {}`, the input,
title, locations and diff in an update after);
with `permission` (and the session in mode `default`) asked first; then `in_progress` and
done, a `write` through the client's `fs/write_text_file`, a `read` through its
`fs/read_text_file`, a `terminal` through its `terminal/*` (created, embedded in the call,
waited for, its output read, released); then `completed` (or `failed` when the client
refused the call, or the command exited non-zero). A
refused permission fails the call and ends the turn (`end_turn`), as a real agent stops and
tells the user; a cancelled one ends it `cancelled`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from acp import (
    RequestError,
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    tool_terminal_ref,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
)
from acp.interfaces import Client
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    ContentToolCallContent,
    Cost,
    EnvVariable,
    FileEditToolCallContent,
    PermissionOption,
    PlanEntry,
    StopReason,
    TerminalToolCallContent,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallStatus,
    ToolCallUpdate,
    ToolKind,
    UsageUpdate,
)

from loopdeck.acp_env.config import AgentStep, AgentTerminal, AgentTurn, AgentUsage

Update = (
    AgentMessageChunk
    | AgentThoughtChunk
    | AgentPlanUpdate
    | ToolCallStart
    | ToolCallProgress
    | UsageUpdate
)
Answer = Literal["allow", "reject", "cancelled"]

ALLOWING = ("allow", "allow_always")
OPTIONS = [
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="allow_always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]
KINDS: dict[str, ToolKind] = {kind: kind for kind in get_args(ToolKind)}
UNKNOWN_CALL_ID = "call_999"
REFUSED = "the write was refused"


@dataclass
class Session:
    """One ACP session of the scripted agent."""

    id: str
    cwd: Path
    mode: str = "default"
    prompts: int = 0
    tool_calls: int = 0
    # ACP's usage_update carries the session's cumulative cost: each step's cost adds to it.
    cost_usd: float = 0.0
    turn_tokens: int | None = None  # what this turn spent, as its steps said
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    def next_call_id(self) -> str:
        self.tool_calls += 1
        return f"call_{self.tool_calls}"


class TurnPlayer:
    """Plays one turn on a session and answers the turn's stop reason."""

    def __init__(
        self, client: Client, session: Session, turn: AgentTurn, stdout: asyncio.StreamWriter
    ) -> None:
        self.client = client
        self.session = session
        self.turn = turn
        # The SDK's own writer to stdout: a garbage line goes between two whole messages.
        self.stdout = stdout
        self.running: set[str] = set()  # tool calls already said in_progress

    async def play(self) -> StopReason:
        for step in self.turn.steps:
            if self.cancelled():
                return "cancelled"
            stop = await self.step(step)
            if stop is not None:
                return stop
        return self.turn.stop

    def cancelled(self) -> bool:
        return self.session.cancelled.is_set() and not self.turn.ignore_cancel

    async def send(self, update: Update) -> None:
        await self.client.session_update(session_id=self.session.id, update=update)

    async def step(self, step: AgentStep) -> StopReason | None:
        """Plays one step; a stop reason when the step ends the turn."""
        if step.plan is not None:
            await self.send(update_plan(plan_entries(step.plan)))
        elif step.message is not None:
            await self.send(update_agent_message_text(step.message))
        elif step.thought is not None:
            await self.send(update_agent_thought_text(step.thought))
        elif step.usage is not None:
            await self.send(self.usage_update(step.usage))
        elif step.unknown_update:
            await self.tool_update(UNKNOWN_CALL_ID, "completed", "done")
        elif step.garbage is not None:
            self.stdout.write(step.garbage.encode("utf-8") + b"\n")
            await self.stdout.drain()
        elif step.exit is not None:
            sys.stderr.write(f"scripted agent: exiting with {step.exit} mid-turn\n")
            sys.stderr.flush()
            os._exit(step.exit)
        else:
            return await self.tool(step)
        return None

    def usage_update(self, usage: AgentUsage) -> UsageUpdate:
        cost = None
        if usage.tokens is not None:
            self.session.turn_tokens = (self.session.turn_tokens or 0) + usage.tokens
        if usage.cost is not None:
            self.session.cost_usd += usage.cost
            cost = Cost(amount=round(self.session.cost_usd, 6), currency="USD")
        return UsageUpdate(
            session_update="usage_update", used=usage.used, size=usage.size, cost=cost
        )

    async def tool_update(self, call_id: str, status: ToolCallStatus, text: str = "") -> None:
        content = [tool_content(text_block(text))] if text else None
        await self.send(update_tool_call(call_id, status=status, content=content))

    async def start(self, call_id: str) -> None:
        if call_id not in self.running:
            self.running.add(call_id)
            await self.tool_update(call_id, "in_progress")

    async def tool(self, step: AgentStep) -> StopReason | None:
        call_id = self.session.next_call_id()
        target = self.path(step.write.path if step.write else step.read)
        diff = self.diff(step, target)
        locations = [ToolCallLocation(path=str(target))] if target else None
        raw_input = step.input or self.terminal_input(step.terminal)
        await self.started(call_id, step, raw_input, diff, locations)
        if step.write is not None and target is not None and step.write_direct:
            target.write_text(step.write.content, encoding="utf-8")
            await self.tool_update(call_id, "completed", f"wrote {step.write.path}")
            return None
        if step.permission and self.session.mode == "default":
            request = ToolCallUpdate(
                tool_call_id=call_id,
                title=step.tool,
                kind=tool_kind(step.kind),
                status="pending",
                raw_input=raw_input,
                content=diff,
                locations=locations,
            )
            stop = await self.asked(call_id, step, await self.ask(request, step))
            if stop is not None:
                return stop
        await self.run(call_id, step, target)
        return None

    async def started(
        self,
        call_id: str,
        step: AgentStep,
        raw_input: dict[str, object],
        diff: list[FileEditToolCallContent] | None,
        locations: list[ToolCallLocation] | None,
    ) -> None:
        """The tool call's start: all it is at once, or (`late_input`) as Claude Code starts
        one while the model's input streams, its input in an update after."""
        if step.late_input:
            await self.send(
                start_tool_call(
                    call_id, step.kind.capitalize(), kind=tool_kind(step.kind), status="pending",
                    raw_input={}, content=[], locations=[],
                )
            )  # fmt: skip
            await self.send(
                update_tool_call(
                    call_id, title=step.tool, raw_input=raw_input, content=diff,
                    locations=locations,
                )
            )  # fmt: skip
        else:
            await self.send(
                start_tool_call(
                    call_id, step.tool or "", kind=tool_kind(step.kind), status="pending",
                    raw_input=raw_input, content=diff, locations=locations,
                )
            )  # fmt: skip

    async def ask(self, request: ToolCallUpdate, step: AgentStep) -> Answer:
        asking = self.client.request_permission(
            session_id=self.session.id, tool_call=request, options=OPTIONS
        )
        if step.update_before_answer:
            pending = asyncio.ensure_future(asking)
            # One pass of the loop puts the request in the SDK's send queue, ahead of the update.
            await asyncio.sleep(0)
            await self.start(request.tool_call_id)
            response = await pending
        else:
            response = await asking
        outcome = response.outcome
        if isinstance(outcome, AllowedOutcome):
            return "allow" if outcome.option_id in ALLOWING else "reject"
        return "cancelled"

    async def asked(self, call_id: str, step: AgentStep, answer: Answer) -> StopReason | None:
        """What the permission's answer does to the turn; None goes on with the tool."""
        if self.cancelled():
            await self.tool_update(call_id, "failed", "cancelled")
            return "cancelled"
        if answer == "cancelled":
            await self.tool_update(call_id, "failed", "the permission was cancelled")
            # A turn that ignores cancel goes on with its next step, without this tool.
            return None if self.turn.ignore_cancel else "cancelled"
        if answer == "reject" and not step.ignore_rejection:
            await self.tool_update(call_id, "failed", "refused by the user")
            await self.send(update_agent_message_text(REFUSED))
            return "end_turn"
        return None

    async def run(self, call_id: str, step: AgentStep, target: Path | None) -> None:
        """The tool's work, once allowed: a write or a read through the client, or nothing."""
        await self.start(call_id)
        try:
            if step.terminal is not None:
                await self.terminal(call_id, step.terminal)
                return
            if step.write is not None and target is not None:
                await self.client.write_text_file(
                    session_id=self.session.id, path=str(target), content=step.write.content
                )
                done = f"wrote {step.write.path}"
            elif step.read is not None and target is not None:
                read = await self.client.read_text_file(
                    session_id=self.session.id, path=str(target)
                )
                done = read.content
            else:
                done = "done"
        except RequestError as exc:  # the client refused the fs call: the tool failed
            reason = str(exc) if exc.data is None else f"{exc}: {exc.data}"
            await self.tool_update(call_id, "failed", reason)
            return
        await self.tool_update(call_id, "completed", done)

    @staticmethod
    def terminal_input(terminal: AgentTerminal | None) -> dict[str, object]:
        if terminal is None:
            return {}
        command, args = expanded(terminal)
        return {"command": command, "args": args}

    async def terminal(self, call_id: str, spec: AgentTerminal) -> None:
        """Runs the command in the client's terminal, embedded in the call, and reports it."""
        client, session = self.client, self.session.id
        command, args = expanded(spec)
        env = [EnvVariable(name=name, value=value) for name, value in spec.env.items()]
        created = await client.create_terminal(
            session_id=session, command=command, args=args, env=env or None,
            cwd=None if spec.cwd is None else str(self.session.cwd / spec.cwd),
            output_byte_limit=spec.output_byte_limit,
        )  # fmt: skip
        ref = tool_terminal_ref(created.terminal_id)
        await self.send(update_tool_call(call_id, status="in_progress", content=[ref]))
        done = await client.wait_for_terminal_exit(session_id=session, terminal_id=ref.terminal_id)
        out = await client.terminal_output(session_id=session, terminal_id=ref.terminal_id)
        await client.release_terminal(session_id=session, terminal_id=ref.terminal_id)
        said = f"exit {done.exit_code if done.signal is None else done.signal}"
        text = said + (" (output truncated)" if out.truncated else "") + "\n" + out.output
        content: list[TerminalContent] = [ref, tool_content(text_block(text))]
        status: ToolCallStatus = "completed" if done.exit_code == 0 else "failed"
        await self.send(update_tool_call(call_id, status=status, content=content))

    def path(self, relative: str | None) -> Path | None:
        return None if relative is None else self.session.cwd / relative

    @staticmethod
    def diff(step: AgentStep, target: Path | None) -> list[FileEditToolCallContent] | None:
        if step.write is None or target is None:
            return None
        old = None
        with contextlib.suppress(OSError, UnicodeDecodeError):
            old = target.read_text(encoding="utf-8")
        return [tool_diff_content(str(target), step.write.content, old_text=old)]


TerminalContent = TerminalToolCallContent | ContentToolCallContent


def expanded(terminal: AgentTerminal) -> tuple[str, list[str]]:
    """The command and its arguments, `{python}` the agent's own interpreter."""
    command = terminal.command.replace("{python}", sys.executable)
    return command, [arg.replace("{python}", sys.executable) for arg in terminal.args]


def plan_entries(items: list[str]) -> list[PlanEntry]:
    return [
        plan_entry(item, status="in_progress" if i == 0 else "pending")
        for i, item in enumerate(items)
    ]


def tool_kind(kind: str) -> ToolKind:
    return KINDS.get(kind, "other")


def turn_for(turns: list[AgentTurn], prompt_index: int) -> AgentTurn | None:
    """The turn the prompt plays: the i-th, or the repeat turn reached before it."""
    for index, turn in enumerate(turns):
        if index == prompt_index or (turn.repeat and index < prompt_index):
            return turn
    return None
