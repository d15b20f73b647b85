"""The browser console's first frame after the page opens (issue 30): `loopdeck serve` opened
in Debian's chromium (Playwright, headless) OPENINGS times, each in a fresh browser context
(nothing cached, as a first visit), next to a plain textual-serve of Textual's hello world
(`hello_world.py`) opened alternately in the same bench run.

How a frame is seen: textual-serve's page (`textual.js`) draws on a canvas (xterm.js's WebGL
or canvas renderer), so no text reaches the DOM. A script put in the page before its own wraps
`WebSocket`: each binary message (the console's terminal output) is decoded, its escape
sequences stripped, and the time (`performance.now()`, from the navigation's start) noted:

- first text: the first message with any visible character;
- first frame: the first message that completes the app's first screen's marker (loopdeck's
  fleet header `loopdeck · fleet`; the hello world's `Hello, World!`);
- painted: two animation frames after the first frame's message (xterm renders on an
  animation frame: an upper bound, at most one frame late).

Each opening starts with both servers settled: the last tab's app gone, loopdeck's spare
console (the one it keeps started for the next tab, `cli/serve_consoles.py`) waiting, and
every served process idle, so neither side is measured while the other's processes work.

Target: the issue gives no number. Chosen: the first frame painted within 1 s (p50) of the page
opening, the limit under which a wait does not interrupt the operator's flow of thought
(Nielsen's response-time limits), and within 1.5x of textual-serve's hello world, the ratio
the terminal console's first frame is held to against Textual's hello world (target 6,
`start_time.py`): what loopdeck adds over textual-serve itself.

    .venv/bin/python bench/serve_first_frame.py [OPENINGS]
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from targets_table import Row, print_table

CHROMIUM = Path("/usr/bin/chromium")
HELLO = Path(__file__).resolve().with_name("hello_world.py")
LOOPDECK_MARKER = "loopdeck · fleet"
HELLO_MARKER = "Hello, World!"
TARGET_S, TARGET_RATIO = 1.0, 1.5
SPARE = "loopdeck-spare"  # a spare console's thread name, while it waits for a tab
IDLE_S = 0.3
MARKS = ("ws_created", "ws_open", "first_bytes", "first_text", "first_frame", "painted")

# Runs in the page before textual.js: every WebSocket built afterwards is watched.
WATCH = r"""
(() => {
  const marks = { ws_created: null, ws_open: null, first_bytes: null, first_text: null,
                  first_frame: null, painted: null };
  window.__bench = marks;
  const marker = MARKER;
  const escapes = new RegExp([  // CSI, OSC, DCS/SOS/PM/APC, then any other two-byte escape
    String.raw`\x1b\[[0-?]*[ -\/]*[@-~]`,
    String.raw`\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)`,
    String.raw`\x1b[PX^_][\s\S]*?\x1b\\`,
    String.raw`\x1b[@-Z\\-_]`,
  ].join("|"), "g");
  const decoder = new TextDecoder();
  let seen = "";
  const Real = window.WebSocket;
  window.WebSocket = class extends Real {
    constructor(...args) {
      super(...args);
      marks.ws_created = performance.now();
      this.addEventListener("open", () => { marks.ws_open = performance.now(); });
      this.addEventListener("message", (event) => {
        if (typeof event.data === "string" || marks.first_frame !== null) return;
        const now = performance.now();
        if (marks.first_bytes === null) marks.first_bytes = now;
        seen += decoder.decode(event.data, { stream: true });
        const shown = seen.replace(escapes, "");
        if (marks.first_text === null && /\S/.test(shown)) marks.first_text = now;
        if (shown.includes(marker)) {
          marks.first_frame = now;
          requestAnimationFrame(() => requestAnimationFrame(() => {
            marks.painted = performance.now();
          }));
        }
      });
    }
  };
})();
"""


@dataclass
class Served:
    name: str
    process: subprocess.Popen[str]
    url: str
    marker: str

    def apps(self) -> list[int]:
        """The app processes it runs for its tabs (its children, but a spare console)."""
        return [pid for pid in children(self.process.pid) if name_of(pid) != SPARE]

    def spares(self) -> list[int]:
        return [pid for pid in children(self.process.pid) if name_of(pid) == SPARE]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def name_of(pid: int) -> str:
    with contextlib.suppress(OSError):
        return (Path("/proc") / str(pid) / "comm").read_text().strip()
    return ""


def cpu_ticks(pids: list[int]) -> int:
    """User and system time of these processes, in clock ticks."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total


def rss_mb(pid: int) -> float:
    for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def serve_loopdeck(db: Path) -> Served:
    process = subprocess.Popen(
        [sys.executable, "-m", "loopdeck", "serve", "--port", "0", "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("open http://"):
            return Served("loopdeck serve", process, line.split()[1], LOOPDECK_MARKER)
    raise SystemExit(f"loopdeck serve never said its URL (exit {process.wait()})")


def serve_hello() -> Served:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = f"{sys.executable} {HELLO}"
    code = (
        "from textual_serve.server import Server; "
        f"Server({command!r}, host='127.0.0.1', port={port}).serve()"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    end = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            break
        if time.monotonic() > end or process.poll() is not None:
            raise SystemExit("textual-serve's hello world never listened")
        time.sleep(0.05)
    return Served("textual serve hello", process, f"http://127.0.0.1:{port}/", HELLO_MARKER)


def open_once(browser: Any, served: Served, both: tuple[Served, ...]) -> dict[str, float]:
    """One opening in a fresh context: the page's marks, in seconds from its navigation."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        context.add_init_script(WATCH.replace("MARKER", json.dumps(served.marker)))
        page = context.new_page()
        assert page.goto(served.url).status == 200
        page.wait_for_function("window.__bench && window.__bench.painted !== null", timeout=60_000)
        marks: dict[str, float] = page.evaluate("window.__bench")
    finally:
        context.close()
    settle(both)
    return {name: marks[name] / 1000 for name in MARKS}


def settle(both: tuple[Served, ...], timeout: float = 30) -> None:
    """Until the closed tab's app is gone, loopdeck's spare console waits, and every served
    process was idle for IDLE_S: one opening's end, or a spare's imports, are not the next
    opening's load."""
    end = time.monotonic() + timeout
    idle_since, ticks = time.monotonic(), -1
    while time.monotonic() < end:
        pids = [
            pid for served in both for pid in [served.process.pid, *children(served.process.pid)]
        ]
        busy = any(served.apps() for served in both) or not both[0].spares()
        now = cpu_ticks(pids)
        if busy or now != ticks:
            idle_since, ticks = time.monotonic(), now
        elif time.monotonic() - idle_since >= IDLE_S:
            return
        time.sleep(0.05)
    raise SystemExit("the servers never settled: an app or a spare console kept working")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def describe(served: Served, opened: list[dict[str, float]]) -> str:
    def said(mark: str) -> str:
        values = [o[mark] for o in opened]
        return (
            f"{mark} p50 {_pct(values, 0.5) * 1000:.0f} ms p99 {_pct(values, 0.99) * 1000:.0f} ms"
        )

    lines = [f"{served.name}: {len(opened)} openings, each from the page's navigation:"]
    lines += [f"  {said(mark)}" for mark in MARKS]
    painted = ", ".join(f"{o['painted'] * 1000:.0f}" for o in opened)
    lines.append(f"  painted, each opening (ms): {painted}")
    return "\n".join(lines)


@contextlib.contextmanager
def servers() -> Iterator[tuple[Served, Served]]:
    """loopdeck's first (the one with a spare console), then the hello world's."""
    with tempfile.TemporaryDirectory(prefix="loopdeck-serve-bench-") as folder:
        ours = serve_loopdeck(Path(folder) / "runs.db")
        try:
            hello = serve_hello()
            try:
                yield ours, hello
            finally:
                hello.stop()
        finally:
            ours.stop()


def measure(openings: int) -> list[Row]:
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise SystemExit(f"no {CHROMIUM}: `apt-get install chromium` (tests/test_serve_browser.py)")
    taken: dict[str, list[dict[str, float]]] = {}
    with servers() as both, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
        try:
            settle(both)
            for served in both:  # warm: the first console's imports from disk
                open_once(browser, served, both)
            spare = rss_mb(both[0].spares()[0])
            for _ in range(openings):
                for served in both:
                    taken.setdefault(served.name, []).append(open_once(browser, served, both))
        finally:
            browser.close()
        for served in both:
            print(describe(served, taken[served.name]))
        print(f"loopdeck's spare console, waiting: {spare:.0f} MB resident")
        ours, hello = (statistics.median(o["painted"] for o in taken[s.name]) for s in both)
    return [
        Row("browser console's first frame painted (p50)", f"{ours * 1000:.0f} ms",
            f"{TARGET_S * 1000:.0f} ms", ours / TARGET_S, "<= 1x"),
        Row("first frame vs textual serve hello world", f"{ours * 1000:.0f} ms",
            f"{hello * 1000:.0f} ms", ours / hello, f"<= {TARGET_RATIO}x"),
    ]  # fmt: skip


if __name__ == "__main__":
    print_table(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
