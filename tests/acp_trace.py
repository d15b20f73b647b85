"""A relay between loopdeck and an ACP agent that writes every JSON-RPC line both ways to a
file, for the tests that drive real agents: `python acp_trace.py -- AGENT ARGS…`, the file
named by `ACP_TRACE_FILE` in its environment (from the `[agent] env` table).

Each line of the trace is `{"t": seconds since start, "dir": "to_agent" | "from_agent",
"msg": the message}` (a line that is not JSON is kept as `{"raw": text}`). The relay runs the
agent as its child in its own process group (the guardian's), passes stdin and stdout through
unchanged, lets stderr through, and ends with the agent's exit code; SIGTERM and SIGINT are
passed on to the agent. Read a trace back with `read_trace`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The trace's entries; a last line still being written is left out."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            entries.append(json.loads(line))
    return entries


def _pump(
    src: IO[bytes], dst: IO[bytes], out: IO[str], direction: str, lock: threading.Lock, t0: float
) -> None:
    try:
        for line in iter(src.readline, b""):
            text = line.decode("utf-8", "replace").strip()
            if text:  # written down before it is passed on, so the trace keeps the order
                try:
                    msg: Any = json.loads(text)
                except ValueError:
                    msg = {"raw": text[:4000]}
                entry = {"t": round(time.monotonic() - t0, 3), "dir": direction, "msg": msg}
                with lock:
                    out.write(json.dumps(entry) + "\n")
                    out.flush()
            try:
                dst.write(line)
                dst.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass
    finally:
        if direction == "to_agent":
            with contextlib.suppress(OSError):
                dst.close()


def main(argv: list[str]) -> int:
    if argv[:1] != ["--"] or len(argv) < 2 or not os.environ.get("ACP_TRACE_FILE"):
        print("usage: ACP_TRACE_FILE=TRACE.jsonl acp_trace.py -- AGENT ARGS…", file=sys.stderr)
        return 2
    trace, command = Path(os.environ["ACP_TRACE_FILE"]), argv[1:]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda num, _frame: child.send_signal(num))
    lock, t0 = threading.Lock(), time.monotonic()
    with trace.open("a", encoding="utf-8") as out:
        inbound = threading.Thread(
            target=_pump,
            args=(sys.stdin.buffer, child.stdin, out, "to_agent", lock, t0),
            daemon=True,
        )
        inbound.start()
        _pump(child.stdout, sys.stdout.buffer, out, "from_agent", lock, t0)
        code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
