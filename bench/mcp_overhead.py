"""The price of loopdeck's supervision on an MCP server's tools (issue 28): a call made through
a supervised run against the same call made by a bare `mcp` client, on the same server.

The server (written here with the SDK's server side) has one read-only no-op tool,
`noop(n)`, and one resource. The bare client calls `noop` N times in a row. The supervised run
makes the same N calls, 64 to a model reply (the scripted model: its turns cost a 64th of a
call each), each through the guard, the state read that keys it, the dispatcher and the
events; timed from the first call's proposal to the last call's end. Two supervised runs: the
state read from the server's resource (`snapshot = [{ resource }]`), and the state not
observed (`snapshot = "none"`). The state is read once per change (issue 43,
`core/state_reads.py`): `noop` is read-only by the server's annotation, so the resource is read
once, before the first call, where it was read before every call and after it (three round
trips a call). Target: <= 1.5x the bare client's time per call, the state read counted once.

    .venv/bin/python bench/mcp_overhead.py [CALLS]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from targets_table import Row, print_table

from loopdeck.core.events import CallProposed, EventBus, ToolFinished
from loopdeck.operator.launch import RunOptions, prepare_run

SERVER = '''
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("bench", version="1.0")

@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def noop(n: int) -> str:
    """Does nothing."""
    return "ok"

@server.resource("bench://state", mime_type="text/plain")
def state() -> str:
    """Never changes."""
    return "steady"

if __name__ == "__main__":
    server.run()
'''
PER_REPLY = 64


def _env(folder: Path, calls: int, snapshot: str) -> Path:
    env = folder / f"bench_{snapshot.split()[0].strip('[{')}"
    env.mkdir()
    (env / "server.py").write_text(SERVER, encoding="utf-8")
    (env / "check.py").write_text("import sys; sys.exit(1)\n", encoding="utf-8")
    turns = []
    for start in range(0, calls, PER_REPLY):
        batch = ", ".join(
            f'{{ tool = "noop", args = {{ n = {n} }} }}'
            for n in range(start, min(start + PER_REPLY, calls))
        )
        turns.append(f"[[scripts.bench.executor]]\ncalls = [{batch}]\n")
    turns.append('[[scripts.bench.executor]]\nfinal = "done"\n')
    (env / "scenario.toml").write_text(
        f"""name = "mcp_bench"
goal = "Call noop."
mode = "react"
goal_check = ["{{python}}", "{{envdir}}/check.py"]
[budgets]
max_turns = 1000
max_tool_calls = 100000
max_tokens = 1000000000
max_cost_usd = 100000.0
deadline_s = 600
[mcp]
command = ["{{python}}", "{{envdir}}/server.py"]
snapshot = {snapshot}
[scripts.bench]
{"".join(turns)}""",
        encoding="utf-8",
    )
    return env


async def _supervised(env: Path) -> tuple[float, int]:
    """Seconds from the first proposal to the last call's end, and the calls made."""
    bus = EventBus()
    marks: list[float] = []
    ended: list[float] = []
    bus.subscribe(
        lambda e: (
            marks.append(time.perf_counter())
            if isinstance(e, CallProposed) and not marks
            else ended.append(time.perf_counter())
            if isinstance(e, ToolFinished)
            else None
        )
    )
    prepared = prepare_run(RunOptions(env=str(env), script="bench", approve="auto"), bus=bus)
    try:
        await prepared.runtime.run()
    finally:
        prepared.cleanup()
    return ended[-1] - marks[0], len(ended)


async def _bare(env: Path, calls: int) -> float:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(env / "server.py")])
    with open("/dev/null", "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.call_tool("noop", {"n": -1})  # warm
            started = time.perf_counter()
            for n in range(calls):
                await session.call_tool("noop", {"n": n}, read_timeout_seconds=30)
            return time.perf_counter() - started


async def measure(calls: int, rounds: int = 3) -> list[Row]:
    """Each figure the best of `rounds`, the three interleaved (this machine's speed drifts)."""
    with tempfile.TemporaryDirectory() as folder:
        observed = _env(Path(folder), calls, '[{ resource = "bench://state" }]')
        unobserved = _env(Path(folder), calls, '"none"')
        await _supervised(unobserved)  # warm: LiteLLM's import, the first server start
        kinds = ((unobserved, "state not observed"), (observed, "state read"))
        bares: list[float] = []
        supervised: dict[str, list[float]] = {words: [] for _, words in kinds}
        for _ in range(rounds):
            bares.append(await _bare(observed, calls) / calls)
            for env, words in kinds:
                seconds, made = await _supervised(env)
                supervised[words].append(seconds / made)
        bare = min(bares)
        rows = []
        for words, per_calls in supervised.items():
            per_call = min(per_calls)
            print(f"supervised ({words}): {calls} calls, {per_call * 1000:.3f} ms a call")
            rows.append(
                Row(
                    f"MCP call under supervision ({words})",
                    f"{per_call * 1000:.3f} ms",
                    f"bare client {bare * 1000:.3f} ms",
                    per_call / bare,
                    "<= 1.5x",
                )
            )
        print(f"bare mcp client: {calls} calls, {bare * 1000:.3f} ms a call")
    return rows


if __name__ == "__main__":
    print_table(asyncio.run(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 640)))
