"""How long a collector that is down or hangs holds the exit of `loopdeck run … --otlp URL`
(issue 37): the seconds from the run's stop to the process's exit, and from `q` to the
console's exit.

1. Headless: `loopdeck run ENV --script solve --headless --approve auto --json`, timed from
   its JSON line (printed once the run has stopped) to the process's end, without `--otlp`,
   with a closed port (connection refused), a collector that accepts and never answers, and
   one that answers a byte every 0.2 s, never to the end. Target: within the bound
   (`OTEL_EXPORTER_OTLP_TIMEOUT`, default 10 s) plus the process's own end, whatever the
   collector does. A process still going after CAP_S is killed (its figure is then CAP_S).
2. The console, if tmux is installed: the same run in a 160x48 tmux window, `q` pressed once
   it stopped, timed to the shell's `EXITED` line.

The env is order_support, or the sample named as the first argument (service_outage takes
longer, so spans also go while it runs).

    .venv/bin/python bench/otlp_exit.py [SAMPLE]
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOPDECK = Path(sys.executable).with_name("loopdeck")
CAP_S = 120.0  # a process still going then is killed, and said so


@contextmanager
def hanging(trickle: bool = False) -> Iterator[str]:
    """A collector that takes connections and never answers, or (`trickle`) answers a byte
    every 0.2 s and never to the end, so no read timeout fires: its URL."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    done = threading.Event()

    def drip(conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Wait: ")
            while not done.wait(0.2):
                conn.sendall(b".")
        except OSError:
            return

    def accept() -> None:
        while True:
            try:
                held.append(conn := server.accept()[0])
            except OSError:
                return
            if trickle:
                threading.Thread(target=drip, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1/traces"
    finally:
        done.set()
        server.close()
        for conn in held:
            conn.close()


@contextmanager
def trickling() -> Iterator[str]:
    with hanging(trickle=True) as url:
        yield url


@contextmanager
def closed() -> Iterator[str]:
    """A port nothing listens on: connection refused."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1/traces"


@contextmanager
def no_collector() -> Iterator[str]:
    yield ""


def headless(env: Path, url: str) -> tuple[float, float, str]:
    """(stop → exit, whole process) in seconds, and stderr's last line."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [str(LOOPDECK), "run", str(env), "--script", "solve", "--headless",
                "--approve", "auto", "--json", "--db", str(Path(tmp) / "runs.db")]  # fmt: skip
        if url:
            argv += ["--otlp", url]
        start = time.monotonic()
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdout is not None
        process.stdout.readline()  # the JSON object: the run has stopped
        stopped = time.monotonic()
        try:
            _, err = process.communicate(timeout=CAP_S)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        ended = time.monotonic()
    last = err.decode().strip().splitlines()[-1] if err.strip() else ""
    return ended - stopped, ended - start, _said(last)


def _screen(name: str) -> str:
    done = subprocess.run(["tmux", "-L", name, "capture-pane", "-p", "-t", name],
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout


def _wait(name: str, text: str, timeout: float = CAP_S) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if text in (screen := _screen(name)):
            return screen
        time.sleep(0.01)
    raise SystemExit(f"{text!r} never appeared:\n{_screen(name)}")


def console(env: Path, url: str) -> tuple[float, str]:
    """`q` → the shell's EXITED line, in seconds, and the line said before it."""
    name = f"bench-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp:
        otlp = f" --otlp {url}" if url else ""
        command = (f"env -u COLUMNS -u LINES {LOOPDECK} run {env} --script solve --approve auto"
                   f" --db {Path(tmp) / 'runs.db'}{otlp}")  # fmt: skip
        shell = f"{command}; echo EXITED $?; sleep 300"
        size = ["-x", "160", "-y", "48"]
        subprocess.run(
            ["tmux", "-L", name, "new-session", "-d", "-s", name, *size, shell], check=True
        )
        try:
            _wait(name, "GOAL_MET")
            start = time.monotonic()
            subprocess.run(["tmux", "-L", name, "send-keys", "-t", name, "q"], check=True)
            try:
                screen = _wait(name, "EXITED")
            except SystemExit:
                return time.monotonic() - start, "(still going: not waited for longer)"
            seconds = time.monotonic() - start
        finally:
            subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)
    lines = [line for line in screen.splitlines() if line.strip()]
    said = next((line for line in reversed(lines) if line.startswith("loopdeck:")), "")
    return seconds, _said(said)


def _said(line: str) -> str:
    """The line about the trace, without the command that sends it again."""
    return line.partition("; send it later")[0] if line.startswith("loopdeck:") else ""


def main() -> None:
    env = ROOT / "sample_envs" / (sys.argv[1] if len(sys.argv) > 1 else "order_support")
    collectors = {"no --otlp": no_collector, "connection refused": closed, "hangs": hanging,
                  "trickles": trickling}  # fmt: skip
    print(f"{env.name}, headless: seconds from the run's stop to the process's exit")
    for label, collector in collectors.items():
        with collector() as url:
            after, whole, last = headless(env, url)
        print(f"  {label:<20} {after:6.1f} s  (whole process {whole:5.1f} s)  {last}")
    if shutil.which("tmux") is None:
        print("console: tmux is not installed, not timed")
        return
    print(f"{env.name}, console: seconds from `q` (after the stop) to the shell's prompt")
    for label, collector in collectors.items():
        with collector() as url:
            seconds, said = console(env, url)
        print(f"  {label:<20} {seconds:6.1f} s  {said}")


if __name__ == "__main__":
    main()
