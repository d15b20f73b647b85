"""A tab's console started before its tab: `loopdeck serve` keeps one waiting, so a page that
opens finds the console's imports done (most of its first frame's time: Textual, pydantic,
the runtime's models, the screens).

    python -m loopdeck.cli.spare_console console --db LOCATION

It imports what the console's first frame needs (`WARM`), then waits for its tab: the first
packet on stdin, textual-serve's own `resize` meta packet (`M`, a 4-byte big-endian length,
JSON), gives the tab's size; then it is `loopdeck ARGS…` in that size, as a console started
then. Stdin closed before a tab came (the server stopped): it ends, exit 0. Its thread's name
(`comm`, what `ps` and `top` show) is `SPARE_NAME` while it waits, `TAB_NAME` once its tab came.

Read unbuffered from fd 0: what follows the size (the tab's first keys) is the web driver's.
Its tab closing comes as a hangup: its runs are recorded killed by "browser tab closed".
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import signal
import sys

from loopdeck import stop_signals

# What the console imports before its first frame (`loopdeck console`: the parser, the store
# check, the app, the fleet; the run screens `first_screen` imports with it).
WARM = (
    "textual.drivers.web_driver",
    "loopdeck.cli",
    "loopdeck.cli.runs",
    "loopdeck.operator.records",
    "loopdeck.tui.app",
    "loopdeck.tui.fleet_screen",
    "loopdeck.tui.run_screen",
    "loopdeck.tui.replay",
)
SPARE_NAME, TAB_NAME = b"loopdeck-spare", b"loopdeck-tab"
# A tab's console hears its tab close as a hangup (`serve_consoles`): its runs are killed by it.
TAB_CLOSED = "browser tab closed"
PR_SET_NAME = 15
EXIT_NO_TAB, EXIT_BAD_START = 0, 2


class BadStart(Exception):
    """What came first on stdin is not a tab's size."""


def read_exactly(fd: int, size: int) -> bytes | None:
    """`size` bytes from `fd`, or None at its end."""
    taken = b""
    while len(taken) < size:
        chunk = os.read(fd, size - len(taken))
        if not chunk:
            return None
        taken += chunk
    return taken


def tab_size(fd: int = 0) -> tuple[int, int] | None:
    """The tab's width and height from its first packet, or None if stdin ended first."""
    head = read_exactly(fd, 5)
    if head is None:
        return None
    kind, length = head[:1], int.from_bytes(head[1:], "big")
    if kind != b"M" or length > 4096:
        raise BadStart(f"first packet of kind {kind!r} and {length} bytes, not a resize")
    payload = read_exactly(fd, length)
    if payload is None:
        return None
    try:
        meta = json.loads(payload)
        if meta.get("type") != "resize":
            raise BadStart(f"first packet {meta.get('type')!r}, not a resize")
        width, height = int(meta["width"]), int(meta["height"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadStart(f"first packet not a resize: {exc}") from None
    if not (0 < width <= 10_000 and 0 < height <= 10_000):
        raise BadStart(f"a tab of {width}x{height} cells")
    return width, height


def name_thread(name: bytes) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name, 0, 0, 0)


def main() -> None:
    name_thread(SPARE_NAME)
    for module in WARM:
        importlib.import_module(module)
    try:
        size = tab_size()
    except BadStart as exc:
        print(f"loopdeck: spare console: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_START)
    if size is None:
        sys.exit(EXIT_NO_TAB)
    name_thread(TAB_NAME)
    stop_signals.name_signal(signal.SIGHUP, TAB_CLOSED)
    os.environ["COLUMNS"], os.environ["ROWS"] = str(size[0]), str(size[1])
    sys.argv = ["loopdeck", *sys.argv[1:]]
    from loopdeck.cli import entry

    entry()


if __name__ == "__main__":
    main()
