"""The console under a runaway (issue 11, targets 3 and 4).

3. A 2,000-call runaway through `LiteLLMModel("scripted")` (the real model path, history
   growing to 4,000 messages) with the console open at 160x48: the event loop's longest stall
   (a 5 ms ticker's worst lateness) and the slowest answer to a key (`tab` pressed every
   100 ms, timed until the focus moved). On a loaded machine the ticker is also late by the
   time the OS kept the loop's thread waiting for a core, which no code of the process can
   shorten: the stall is also given without it (the thread's run-queue wait over each tick,
   from /proc/thread-self/schedstat; issue 43). The run itself runs on the runs' own thread
   and loop (`operator/run_loop.py`, issue 43): what is left of a stall is the console's own
   work (a frame's fold and paint: FramePacer's and the spinner's timers), slowed by sharing
   the interpreter's lock with that thread.
4. A runaway (20,000 calls: 100,000 events) with a zero-latency in-process model (the hardest
   case for the console): calls/s
   headless and with the console open, the screen's lag behind the runtime (worst time from an
   event to the end of the paint that shows it: the compositor's update written out, not only
   scheduled) and stop-to-screen (run_stopped to its painted frame).

Each of the two runs in a fresh process of its own (headless and console side by side in it).

    .venv/bin/python bench/console_load.py [CALLS]
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from model_path import SCRIPT, PollingEnv
from steps_per_second import ZeroLatencyModel
from targets_table import Row, print_table
from textual import events

from loopdeck import tuning
from loopdeck.core import AutoApprover, Budget, RunConfig, Runtime
from loopdeck.core.events import EventBase
from loopdeck.llm.client import LiteLLMModel
from loopdeck.llm.loader import litellm_module
from loopdeck.operator.approval_queue import ApprovalQueue
from loopdeck.operator.launch import PreparedRun
from loopdeck.operator.session import RunSession
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.run_screen import RunScreen


def runaway(calls: int, model: Any) -> Runtime:
    """Polls until the tool-call budget stops it: `calls` calls, then budget_exhausted."""
    budget = Budget(
        max_turns=10**9, max_tool_calls=calls, max_tokens=10**12, max_cost_usd=10**6,
        deadline_s=3600, max_rounds=1,
    )  # fmt: skip
    config = RunConfig(env="bench", model=model.name, goal="the job finishes", budget=budget)
    return Runtime(config, PollingEnv(Path("."), {}), model, AutoApprover())


async def headless_rate(calls: int, quick_env_calls: bool = True) -> float:
    runtime = runaway(calls, ZeroLatencyModel())
    if not quick_env_calls:  # env results always come back through the loop's selector
        runtime.env_thread.quick_wait_s = 0.0
    start = time.perf_counter()
    outcome = await runtime.run()
    assert outcome.tool_calls >= calls - 1, outcome
    return outcome.tool_calls / (time.perf_counter() - start)


def run_queue_wait_s() -> float | None:
    """How long the OS has kept this thread waiting for a core, in all (Linux); else None."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class Watch:
    """Times the console from the outside, on the console's own loop."""

    def __init__(self) -> None:
        self.worst_stall_s = 0.0
        self.worst_own_stall_s: float | None = 0.0 if run_queue_wait_s() is not None else None
        self.worst_key_s = 0.0
        self.worst_lag_s = 0.0
        self.stop_to_screen_s: float | None = None
        self.keys = 0

    async def ticker(self) -> None:
        while True:
            # The run-queue figure read first: reading it lets the interpreter's lock go, and
            # taking it back is the ticker's own wait, not the loop's.
            queued = run_queue_wait_s()
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            late = time.perf_counter() - before - 0.005
            self.worst_stall_s = max(self.worst_stall_s, late)
            if queued is not None and self.worst_own_stall_s is not None:
                own = late - ((run_queue_wait_s() or queued) - queued)
                self.worst_own_stall_s = max(self.worst_own_stall_s, own)

    async def keys_on(self, app: LoopdeckApp) -> None:
        while True:
            await asyncio.sleep(0.1)
            focused = app.focused
            pressed = time.perf_counter()
            app.post_message(events.Key("tab", None))
            while app.focused is focused:
                await asyncio.sleep(0.001)
            self.worst_key_s = max(self.worst_key_s, time.perf_counter() - pressed)
            self.keys += 1

    def frames_of(self, app: LoopdeckApp, screen: RunScreen) -> None:
        """Wrap the screen's flush and the app's display: each batch's oldest event against the
        end of the first paint after its fold (the compositor's update written to the
        terminal's driver), the frame that shows it."""
        flush, display = screen.flush, app._display
        folded: list[tuple[float, EventBase | None]] = []  # (oldest, its run_stopped) a batch

        def timed_flush() -> None:
            batch: list[EventBase] = list(screen.arrived)
            flush()
            if batch:
                stop = next((e for e in batch if getattr(e, "kind", "") == "run_stopped"), None)
                folded.append((min(e.at.timestamp() for e in batch), stop))

        def timed_display(*args: Any, **kwargs: Any) -> None:
            display(*args, **kwargs)
            if not folded:
                return
            now = time.time()
            for oldest, stop in folded:
                self.worst_lag_s = max(self.worst_lag_s, now - oldest)
                if stop is not None:
                    self.stop_to_screen_s = now - stop.at.timestamp()
            folded.clear()

        screen.flush = timed_flush  # type: ignore[method-assign]
        app._display = timed_display  # type: ignore[method-assign]


async def console_run(calls: int, model: Any, keys: bool) -> tuple[float, Watch]:
    runtime = runaway(calls, model)
    prepared = PreparedRun(env_dir=None, runtime=runtime, workdir=Path("/nonexistent"))  # type: ignore[arg-type]
    tuning.for_console()  # as `loopdeck run` tunes the process before its console opens
    app = LoopdeckApp(ConsoleStart.for_run(RunSession.adopted(prepared, ApprovalQueue())))
    watch = Watch()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = next(s for s in app.screen_stack if isinstance(s, RunScreen))
        await pilot.pause()  # the first frame (mounting) is the start figure's, not this one's
        watch.frames_of(app, screen)  # so the frames are timed from the next
        tasks = [asyncio.create_task(watch.ticker())]
        if keys:
            tasks.append(asyncio.create_task(watch.keys_on(app)))
        started = time.perf_counter()
        while screen.outcome is None:  # a plain sleep: the pilot's pause waits for idle
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - started
        await pilot.pause(0.2)  # the stop's frame
        for task in tasks:
            task.cancel()
        return runtime.ledger.tool_calls / elapsed, watch


def in_fresh_process(*args: str) -> list[str]:
    """This file run again with `args`: its last line, split. Each console measurement starts
    from a fresh process, as a console does: what earlier measurements left in this one (a
    bigger heap for the collector to walk, LiteLLM's caches) is not the console's."""
    here = Path(__file__).parent
    return subprocess.run(
        [sys.executable, str(here / "console_load.py"), *args],
        capture_output=True, text=True, check=True, cwd=here,
    ).stdout.split()  # fmt: skip


async def zero_latency(calls: int) -> str:
    """Headless (best of 3) and then with the console open, side by side in one process."""
    tuning.for_headless()  # as `loopdeck run --headless` tunes it
    litellm_module()
    await headless_rate(200)  # warm up
    headless = max([await headless_rate(calls) for _ in range(3)])
    plain = max([await headless_rate(calls, quick_env_calls=False) for _ in range(2)])
    shown, watch = await console_run(calls, ZeroLatencyModel(), keys=False)
    stop = watch.stop_to_screen_s or float("inf")
    return f"{plain} {headless} {shown} {watch.worst_lag_s} {stop}"


async def measure(calls: int) -> list[Row]:
    out = in_fresh_process("--zero-latency", str(calls))
    plain, headless, shown, lag, stop = (float(x) for x in out[-5:])
    print(f"zero-latency runaway, {calls} calls: {headless:.0f} calls/s headless, "
          f"{shown:.0f} with the console open")  # fmt: skip
    print(
        f"  headless with every env result handed back through the loop's selector (no quick "
        f"wait): {plain:.0f} calls/s; the console is {shown / plain:.2f}x that"
    )
    print(
        f"screen behind the runtime: worst {lag * 1000:.0f} ms; stop to screen {stop * 1000:.0f} ms"
    )
    out = in_fresh_process("--litellm")
    rate, stall_s, key_s, keys = float(out[-5]), float(out[-4]), float(out[-3]), int(out[-2])
    own_s = None if out[-1] == "None" else float(out[-1])
    own = "" if own_s is None else f" ({own_s * 1000:.1f} ms without the OS's run-queue wait)"
    print(
        f"LiteLLM runaway, 2000 calls with the console open: {rate:.0f} calls/s; longest loop "
        f"stall {stall_s * 1000:.1f} ms{own}; slowest key {key_s * 1000:.1f} ms ({keys} keys)"
    )
    rows = [] if own_s is None else [
        Row("3 loop stall less OS queueing", f"{own_s * 1000:.1f} ms", "20 ms", own_s / 0.020,
            "<= 1x"),
    ]  # fmt: skip
    return [
        *rows,
        Row("3 loop stall, LiteLLM runaway", f"{stall_s * 1000:.1f} ms", "20 ms", stall_s / 0.020,
            "<= 1x"),
        Row("3 key answer, LiteLLM runaway", f"{key_s * 1000:.1f} ms", "50 ms", key_s / 0.050,
            "<= 1x"),
        Row("4 console vs headless rate", f"{shown:.0f} calls/s", f"{headless:.0f} calls/s",
            shown / headless, ">= 0.5x"),
        Row("4 screen behind runtime", f"{lag * 1000:.0f} ms", "100 ms", lag / 0.1, "<= 1x"),
        Row("4 stop to screen", f"{stop * 1000:.0f} ms", "100 ms", stop / 0.1, "<= 1x"),
    ]  # fmt: skip


async def litellm_runaway() -> str:
    tuning.for_console()  # before LiteLLM's import, as `loopdeck run`
    litellm_module()
    rate, watch = await console_run(2000, LiteLLMModel("scripted", script=SCRIPT), keys=True)
    own = watch.worst_own_stall_s
    return f"{rate} {watch.worst_stall_s} {watch.worst_key_s} {watch.keys} {own}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--litellm"]:
        print(asyncio.run(litellm_runaway()))
    elif sys.argv[1:2] == ["--zero-latency"]:
        print(asyncio.run(zero_latency(int(sys.argv[2]))))
    else:
        print_table(asyncio.run(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)))
