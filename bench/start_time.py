"""Start (issue 11, target 6), in tmux at 160x48, median of several launches each:

- launch to the first painted frame (the console's, while the run is prepared behind it),
  next to Textual's hello world, launched alternately in the same bench run (target 1.3x,
  issue 43). Both read their modules' bytecode, as an installed package does: launched with
  their own bytecode folder (PYTHONPYCACHEPREFIX, written by one untimed launch each), so an
  environment that sets PYTHONDONTWRITEBYTECODE (this one: an editable install then compiles
  loopdeck's ~70 modules from source at every start, ~35 ms) measures the same for both;
- launch to the first plan on screen (the planner's first step in the Plan panel), next to
  the time `import litellm` takes in a fresh interpreter (offline, as loopdeck sets it up),
  plus 0.5 s; loopdeck's own loader, faster, is printed beside it. Both read bytecode, as
  installed packages do (LiteLLM's was written by pip; loopdeck's in the same folder as
  above: compiled from source at each launch it measured ~30 ms more than a user pays).

    .venv/bin/python bench/start_time.py [RUNS]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from targets_table import Row, print_table

ROOT = Path(__file__).resolve().parents[1]
LOOPDECK = Path(sys.executable).with_name("loopdeck")
HELLO = Path(__file__).with_name("hello_world.py")
# Kept between runs: a console outlives its tmux (it records its run's stop), still writing.
BYTECODE = Path(tempfile.gettempdir()) / "loopdeck-bench-bytecode"


def first_frame(command: str, text: str, bytecode: Path | None = None) -> float:
    """Seconds from launching `command` in a fresh tmux to `text` on its screen; with
    `bytecode`, the command's Python reads and writes its bytecode there."""
    name = f"bench-{uuid.uuid4().hex[:6]}"
    cached = f"-u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX={bytecode} " if bytecode else ""
    start = time.perf_counter()
    subprocess.run(
        ["tmux", "-L", name, "new-session", "-d", "-s", name, "-x", "160", "-y", "48",
         f"env -u COLUMNS -u LINES {cached}{command}"],
        check=True,
    )  # fmt: skip
    try:
        while True:
            screen = subprocess.run(
                ["tmux", "-L", name, "capture-pane", "-p", "-t", name],
                capture_output=True,
                text=True,
            ).stdout
            if text in screen:
                return time.perf_counter() - start
            if time.perf_counter() - start > 30:
                raise RuntimeError(f"no frame after 30 s:\n{screen}")
            time.sleep(0.005)
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], check=False)
        tmp = Path(os.environ.get("TMUX_TMPDIR", "/tmp"))
        (tmp / f"tmux-{os.getuid()}" / name).unlink(missing_ok=True)  # its socket


# What loopdeck's loader sets before importing LiteLLM (offline: the local cost map), so the
# plain import below does the same work and no network lookup.
LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "MAX_BASE64_LENGTH_FOR_LOGGING": "0",
}


def litellm_import_s(through_loader: bool = False) -> float:
    """LiteLLM's import alone, in a fresh interpreter: `import litellm` as LiteLLM ships it
    (the target's reference), or through loopdeck's loader, which holds the collector until
    LiteLLM's modules are frozen (printed beside it)."""
    timed = (
        "from loopdeck import tuning; tuning.for_headless(); "
        "from loopdeck.llm.loader import litellm_module; litellm_module()"
        if through_loader
        else "import litellm"
    )
    out = subprocess.run(
        [sys.executable, "-c",
         f"import time; t = time.perf_counter(); {timed}; print(time.perf_counter() - t)"],
        capture_output=True, text=True, check=True, env={**os.environ, **LITELLM_ENV},
    ).stdout  # fmt: skip
    return float(out.split()[-1])


def measure(runs: int = 5) -> list[Row]:
    if shutil.which("tmux") is None:
        print("tmux not found: the start figures need it")
        return []
    run = f"{LOOPDECK} run {ROOT / 'sample_envs' / 'order_support'} --script solve"
    hello = f"{sys.executable} {HELLO}"
    ours, theirs, plans, imports, loaded = [], [], [], [], []
    first_frame(hello, "Hello, World!", BYTECODE)  # untimed: each one's bytecode written
    first_frame(run, "loopdeck", BYTECODE)
    for _ in range(runs):
        theirs.append(first_frame(hello, "Hello, World!", BYTECODE))
        ours.append(first_frame(run, "loopdeck", BYTECODE))
    for _ in range(runs):
        plans.append(first_frame(run, "1. Look up order ORD-1042.", BYTECODE))
        imports.append(litellm_import_s())
        loaded.append(litellm_import_s(through_loader=True))
    mine, base = statistics.median(ours), statistics.median(theirs)
    plan, litellm = statistics.median(plans), statistics.median(imports)
    print(
        f"first frame: loopdeck run {mine * 1000:.0f} ms, Textual's hello world {base * 1000:.0f}"
    )
    print(
        f"first plan on screen: {plan:.2f} s; LiteLLM's import alone {litellm:.2f} s "
        f"(through loopdeck's loader, the collector held: {statistics.median(loaded):.2f} s)"
    )
    return [
        Row("6 first frame vs hello world", f"{mine * 1000:.0f} ms", f"{base * 1000:.0f} ms",
            mine / base, "<= 1.3x"),
        Row("6 first plan vs LiteLLM import", f"{plan:.2f} s", f"{litellm:.2f} + 0.5 s",
            plan / (litellm + 0.5), "<= 1x"),
    ]  # fmt: skip


if __name__ == "__main__":
    print_table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
