"""The one place a failure of the console is said: a worker that raised, a command an
attached console could not send, a screen's action that raised (`handler_failed`; the console
goes on). Each is a notification naming what failed, why, and what it means for the run; a
cancelled worker (the screen left, a newer one replaced it) is no failure and stays quiet.

Every node that runs workers routes its `Worker.StateChanged` here (Textual does not bubble
that message); a link's asyncio tasks report through the link's `on_failure` listeners,
which the run's screen points here.
"""

from __future__ import annotations

from typing import Any

from textual.app import App
from textual.widget import Widget
from textual.worker import Worker, WorkerState

from loopdeck.tui.shown import toast

# What a failed worker of each group means for the run, said after the error.
MEANING = {
    "decisions": "it is still pending: w offers it again",
    "fork": "nothing was forked: f again",
    "fork-scripts": "the env's scripts are not offered: type the script's name",
    "inbox": "the inbox no longer follows the store: close it and open it again",
    "inbox-decide": "it is still pending: decide again",
    "outcomes": "its outcome is still unknown: o asks again",
    "pause": "nothing was sent: p again",
    "grants": "the grant still stands: G again",
    "fleet": "the fleet no longer follows the store: restart the console to see new runs",
    "env-listing": "the sample envs are not listed: / names an env folder, n lists again",
    "litellm": "a run tries to load it again as it starts, and says so if it fails",
}
# What a run screen's drive that raised means: its own run is over; a run of another
# process (attached) is only no longer followed.
DRIVE_FAILED = {
    False: "the run is over",
    True: "this console no longer follows the run, which may go on in its own process",
}
FAILED_FOR_S = 30  # a failure stays on screen long enough to be read


def said(error: BaseException | None) -> str:
    """An error in words: its type (the reader's clue) and its message."""
    if error is None:
        return "no error was given"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def say(node: App[Any] | Widget, failed: str, meaning: str = "", title: str = "") -> None:
    """`failed` ("stop not sent: StoreError: …"), then what it means for the run."""
    message = f"{failed} — {meaning}" if meaning else failed
    toast(node, message, title=title or "failed", severity="error", timeout=FAILED_FOR_S)


def handler_failed(node: App[Any] | Widget, what: str, error: BaseException) -> None:
    """A key's or a click's action raised: said; the console goes on without it."""
    say(node, f"{what} failed: {said(error)}", "nothing else changed: the console goes on")


def worker_failed(
    node: App[Any] | Widget, event: Worker.StateChanged, meaning: str = "", title: str = ""
) -> bool:
    """Say a worker that ended in error; True if it did (the caller's own state may follow).
    Any other state, a cancellation included, is left alone."""
    if event.state is not WorkerState.ERROR:
        return False
    worker = event.worker
    what = worker.description or worker.name or "a background task"
    meaning = meaning or MEANING.get(worker.group, "")
    say(node, f"{what} failed: {said(worker.error)}", meaning, title)
    return True
