"""The latency loopdeck adds to an ACP agent's messages (issue 29), over the bare SDK client.

One agent (`acp_bench_agent.py`, on the SDK's agent side) sends, in one prompt turn, UPDATES
`session/update`s paced at RATE a second (tool calls: a `tool_call`, then its `completed`
update), each stamped with `time.perf_counter_ns()` as it is sent, then PERMISSIONS
`session/request_permission`s one after another, each round trip timed by the agent itself.

- bare: a minimal SDK `Client` on the agent's stdio; an update's latency is its send to the
  client's `session_update` callback; a permission is allowed at once.
- loopdeck: a real recorded run (`RunSession`, as `loopdeck run --headless --approve auto`
  does it: a SQLite store in a temporary folder, the agent under the guardian, the run's
  `AcpLoop`); an update's latency is its send to loopdeck's event on the run's bus
  (`CallProposed` for a `tool_call`, `ToolFinished` for its `completed`); a permission is
  the run's approval (auto), recorded before the agent has its answer.

Target (issue 29): loopdeck's added p50 per update <= 1 ms at 1,000 updates/s. The
permission's added round trip is printed with it (no target given). `--files=N` puts N
files in the working copy (default 1): loopdeck keys each tool call by the working copy's
hash, so a tool call's cost grows with the tree. `--profile` runs the loopdeck side once more
under cProfile and prints where its time goes. Message chunks are not sent: loopdeck emits no
event for one (the turn's text goes out in one `ModelCalled` at its end).

    .venv/bin/python bench/acp_overhead.py [UPDATES] [RATE] [PERMISSIONS] [--files=N] [--profile]
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from targets_table import Row, print_table

from loopdeck.core.events import CallProposed, Event, ToolFinished
from loopdeck.operator.launch import RunOptions
from loopdeck.operator.session import RunSession

AGENT = Path(__file__).resolve().with_name("acp_bench_agent.py")
SENT_IN_OUTPUT = re.compile(r"'sent_ns': (\d+)")  # loopdeck keeps a call's output as its text
TARGET_MS = 1.0


class Figures:
    """One side's measures: each update's latency, the agent's own report, the last arrival."""

    def __init__(self) -> None:
        self.latency_ns: list[int] = []
        self.last_ns = 0
        self.agent: dict[str, Any] = {}

    def arrived(self, sent_ns: int) -> None:
        now = time.perf_counter_ns()
        self.latency_ns.append(now - sent_ns)
        self.last_ns = now

    def rate_taken(self) -> float:
        """Updates a second from the first send to the last arrival."""
        span = (self.last_ns - self.agent["first_ns"]) / 1e9
        return len(self.latency_ns) / span if span > 0 else float("inf")

    def rate_sent(self) -> float:
        span = (self.agent["last_ns"] - self.agent["first_ns"]) / 1e9
        return self.agent["updates"] / span if span > 0 else float("inf")


def _ms(ns: float) -> float:
    return ns / 1e6


def _pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


@dataclass(frozen=True)
class Load:
    """What the agent sends, and how many files the working copy holds (loopdeck keys each
    tool call by the working copy's hash: its cost grows with the tree, the bare client's not)."""

    updates: int = 4000
    rate: float = 1000.0
    permissions: int = 200
    files: int = 1

    def command(self, out: Path) -> list[str]:
        return [str(AGENT), str(out), str(self.updates), str(self.rate), str(self.permissions)]

    def warm(self) -> Load:
        return replace(self, updates=50, permissions=5)


# -- the bare SDK client ------------------------------------------------------------------
class BareClient:
    def __init__(self, figures: Figures) -> None:
        self.figures = figures

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        sent = _sent_in(getattr(update, "raw_input", None)) or _sent_in(
            getattr(update, "raw_output", None)
        )
        if sent is not None:
            self.figures.arrived(sent)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **_: Any
    ) -> Any:
        from acp.schema import AllowedOutcome, RequestPermissionResponse

        chosen = options[0].option_id
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=chosen)
        )


def _sent_in(raw: Any) -> int | None:
    return raw.get("sent_ns") if isinstance(raw, dict) else None


async def bare(folder: Path, load: Load) -> Figures:
    from acp import PROTOCOL_VERSION, connect_to_agent, text_block

    figures = Figures()
    out = folder / "bare.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *load.command(out),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=50 * 1024 * 1024,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    conn = connect_to_agent(BareClient(figures), proc.stdin, proc.stdout)
    try:
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(folder), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    finally:
        proc.stdin.close()
        await proc.wait()
        await conn.close()
    figures.agent = json.loads(out.read_text(encoding="utf-8"))
    return figures


# -- loopdeck: a recorded run ----------------------------------------------------------------
def _env(folder: Path, out: Path, load: Load) -> Path:
    env = folder / f"acp_bench_{out.stem}"
    (env / "workspace").mkdir(parents=True)
    (env / "workspace" / "README.md").write_text("The bench agent's working copy.\n")
    for n in range(1, load.files):  # a source tree: a hundred modules a package
        package = env / "workspace" / f"package{n // 100}"
        package.mkdir(exist_ok=True)
        (package / f"module{n}.py").write_text(f"VALUE = {n}\n" * 20)
    acp = json.dumps(["{python}", *load.command(out)])
    (env / "scenario.toml").write_text(
        f"""name = "acp_bench"
goal = "Send the bench's updates and ask the bench's permissions."
mode = "react"
goal_check = ["{{python}}", "-c", "pass"]
[agent]
acp = {acp}
[budgets]
max_turns = 10
max_tool_calls = 1000000
max_tokens = 1000000000
max_cost_usd = 100000.0
deadline_s = 3600
max_rounds = 2
# Never played: launch.prepare_run asks every ACP env for a script (`solve` by default).
[[scripts.solve.turns]]
steps = [{{ message = "unused" }}]
""",
        encoding="utf-8",
    )
    return env


def _taker(figures: Figures) -> Any:
    def take(event: Event) -> None:
        match event:
            case CallProposed(args={"sent_ns": int(sent)}):
                figures.arrived(sent)
            case ToolFinished(result={"data": {"output": str(output)}}):
                if found := SENT_IN_OUTPUT.search(output):
                    figures.arrived(int(found.group(1)))

    return take


async def supervised(folder: Path, load: Load) -> Figures:
    figures = Figures()
    name = f"loopdeck{len(list(folder.glob('acp_bench_*')))}"
    out = folder / f"{name}.json"
    env = _env(folder, out, load)
    session = RunSession(folder / f"{name}.db")
    async with session.opened():
        prepared = session.prepare(RunOptions(env=str(env), approve="auto"))
        prepared.runtime.bus.subscribe(_taker(figures))
        try:
            outcome = await session.record()
        finally:
            session.cleanup()
    if outcome.stop_reason.value != "goal_met":
        raise SystemExit(f"the loopdeck run stopped {outcome.stop_reason.value}: {outcome}")
    figures.agent = json.loads(out.read_text(encoding="utf-8"))
    return figures


# -- figures -------------------------------------------------------------------------------
def describe(name: str, figures: Figures) -> str:
    lat, perm = figures.latency_ns, figures.agent["permission_ns"]
    return (
        f"{name:>8}: {len(lat)} updates sent at {figures.rate_sent():.0f}/s"
        f" ({figures.agent['late']} behind schedule), taken at {figures.rate_taken():.0f}/s;"
        f" latency p50 {_ms(_pct(lat, 0.5)):.3f} ms p99 {_ms(_pct(lat, 0.99)):.3f} ms"
        f" max {_ms(max(lat)):.3f} ms; permission round trip ({len(perm)})"
        f" p50 {_ms(_pct(perm, 0.5)):.3f} ms p99 {_ms(_pct(perm, 0.99)):.3f} ms"
    )


def rows(load: Load, base: Figures, ours: Figures) -> list[Row]:
    rate = load.rate
    lat_base, lat_ours = base.latency_ns, ours.latency_ns
    added_p50 = _ms(_pct(lat_ours, 0.5) - _pct(lat_base, 0.5))
    added_p99 = _ms(_pct(lat_ours, 0.99) - _pct(lat_base, 0.99))
    perm_base, perm_ours = base.agent["permission_ns"], ours.agent["permission_ns"]
    perm_added = _ms(statistics.median(perm_ours) - statistics.median(perm_base))
    print(f"added by loopdeck: update p50 {added_p50:+.3f} ms, p99 {added_p99:+.3f} ms;"
          f" permission round trip p50 {perm_added:+.3f} ms")  # fmt: skip
    if ours.rate_taken() < 0.95 * rate:
        print(f"loopdeck did not keep up: {ours.rate_taken():.0f} updates/s taken of"
              f" {rate:.0f}/s asked ({ours.rate_taken() / rate:.0%})")  # fmt: skip
    return [
        Row(
            f"ACP update, loopdeck's added p50 at {rate:.0f}/s",
            f"{added_p50:.3f} ms",
            f"budget {TARGET_MS:g} ms (bare p50 {_ms(_pct(lat_base, 0.5)):.3f} ms)",
            max(added_p50, 0.0) / TARGET_MS,
            "<= 1x",
        )
    ]


async def measure(load: Load) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="loopdeck-acp-bench-") as name:
        folder = Path(name)
        await supervised(folder, load.warm())  # warm: imports, the first agent's start
        await bare(folder, load.warm())
        base = await bare(folder, load)
        print(describe("bare", base))
        ours = await supervised(folder, load)
        print(describe("loopdeck", ours) + f"; working copy of {load.files} files")
        return rows(load, base, ours)


def profile(load: Load) -> None:
    """The loopdeck side once more under cProfile: the functions its time goes to."""
    import cProfile
    import pstats

    with tempfile.TemporaryDirectory(prefix="loopdeck-acp-bench-") as name:
        folder = Path(name)
        asyncio.run(supervised(folder, load.warm()))
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(supervised(folder, load))
        profiler.disable()
    stats = pstats.Stats(profiler).sort_stats("cumulative")
    stats.print_stats(r"loopdeck/|/acp/", 40)  # loopdeck's code and the SDK's
    stats.sort_stats("tottime").print_stats(25)
    print(working_copy_hash(load))


def working_copy_hash(load: Load) -> str:
    """What one tool call's state hash costs on the env thread (cProfile sees only the loop's
    thread, waiting for it in `state_hash`)."""
    from loopdeck.acp_env.workspace import WorkspaceEnvironment

    with tempfile.TemporaryDirectory(prefix="loopdeck-acp-bench-") as name:
        env = _env(Path(name), Path(name) / "unused.json", load)
        workspace = WorkspaceEnvironment(env / "workspace", {})
        workspace.fingerprint()  # the first reads every file; later ones stat them
        started, times = time.perf_counter(), 20
        for _ in range(times):
            workspace.fingerprint()
        each = (time.perf_counter() - started) / times
    return f"the working copy's hash ({load.files} files): {each * 1000:.3f} ms a tool call"


def main(argv: list[str]) -> None:
    numbers = [arg for arg in argv if not arg.startswith("--")]
    files = [int(arg.split("=")[1]) for arg in argv if arg.startswith("--files=")]
    load = Load(
        *(kind(text) for kind, text in zip((int, float, int), numbers, strict=False)),
        files=files[-1] if files else 1,
    )
    if "--profile" in argv:
        profile(load)
        return
    print_table(asyncio.run(measure(load)))


if __name__ == "__main__":
    main(sys.argv[1:])
