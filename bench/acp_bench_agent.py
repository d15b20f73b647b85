"""The ACP agent `acp_overhead.py` drives: one prompt turn of UPDATES `session/update`s paced at
RATE a second, then PERMISSIONS `session/request_permission`s one after another, each timed
here; what it measured written to OUT as JSON before the turn ends.

    python bench/acp_bench_agent.py OUT UPDATES RATE PERMISSIONS

The updates are tool calls as a real agent sends them: a `tool_call` (kind `read`, its input
distinct, so loopdeck's guard admits it) then its `tool_call_update` `completed`; each carries
`time.perf_counter_ns()` taken just before it is sent (`sent_ns`, in the input or the output):
CLOCK_MONOTONIC is one clock for every process on Linux, so the client's receipt minus it is
the update's latency. Each permission is for an `edit` call started just before it (as agents
do), timed from the request's send to its answer's arrival.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from acp import PROTOCOL_VERSION, run_agent, start_tool_call, update_tool_call
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallUpdate,
)
from acp.stdio import stdio_streams

if TYPE_CHECKING:
    from acp import Agent

OPTIONS = [
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]
SETTLE_S = 0.2  # between the updates and the permissions: the client's queue drains first


class BenchAgent:
    def __init__(self, out: Path, updates: int, rate: float, permissions: int) -> None:
        self.out, self.updates, self.rate, self.permissions = out, updates, rate, permissions
        self.client: Client | None = None

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="loopdeck-bench-agent", version="0"),
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id="bench-1")

    async def cancel(self, session_id: str, **_: Any) -> None:
        return None

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        assert self.client is not None
        sent = await self._updates(self.client, session_id)
        await asyncio.sleep(SETTLE_S)
        round_trips = [await self._permission(self.client, session_id, j)
                       for j in range(self.permissions)]  # fmt: skip
        self.out.write_text(json.dumps({**sent, "permission_ns": round_trips}), encoding="utf-8")
        return PromptResponse(stop_reason="end_turn")

    async def _updates(self, client: Client, session_id: str) -> dict[str, Any]:
        """The updates on a fixed schedule: ahead of it, sleep; behind it (the pipe full, the
        machine busy), send at once, so the rate reached is said, not assumed."""
        period_ns = int(1e9 / self.rate)
        first = time.perf_counter_ns()
        late = 0
        for i in range(self.updates):
            ahead = first + i * period_ns - time.perf_counter_ns()
            if ahead > 0:
                await asyncio.sleep(ahead / 1e9)
            else:
                late += 1
            now = time.perf_counter_ns()
            if i % 2 == 0:
                update: Any = start_tool_call(
                    f"u{i}", "bench read", kind="read", status="pending",
                    raw_input={"n": i, "sent_ns": now},
                )  # fmt: skip
            else:
                update = update_tool_call(
                    f"u{i - 1}", status="completed", raw_output={"sent_ns": now}
                )
            await client.session_update(session_id=session_id, update=update)
        last = time.perf_counter_ns()
        return {"updates": self.updates, "first_ns": first, "last_ns": last, "late": late}

    async def _permission(self, client: Client, session_id: str, j: int) -> int:
        call_id = f"p{j}"
        raw = {"permission": j}
        start = start_tool_call(call_id, "bench edit", kind="edit", status="pending", raw_input=raw)
        await client.session_update(session_id=session_id, update=start)
        asked = ToolCallUpdate(tool_call_id=call_id, title="bench edit", kind="edit", raw_input=raw)
        began = time.perf_counter_ns()
        await client.request_permission(options=OPTIONS, session_id=session_id, tool_call=asked)
        took = time.perf_counter_ns() - began
        done = update_tool_call(call_id, status="completed")
        await client.session_update(session_id=session_id, update=done)
        return took


async def serve(agent: BenchAgent) -> None:
    reader, writer = await stdio_streams()
    await run_agent(cast("Agent", agent), input_stream=writer, output_stream=reader)


def main() -> int:
    out, updates, rate, permissions = sys.argv[1:5]
    asyncio.run(serve(BenchAgent(Path(out), int(updates), float(rate), int(permissions))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
