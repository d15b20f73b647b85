"""A run's moves in words (issue 42): it went on in another worker (`RunMoved`), or it is a
fork of another run (`RunForked`). The transcript's entries and the header's placement read
them here, so `loopdeck` says each move one way wherever it is shown."""

from __future__ import annotations

from loopdeck.core.replay_events import RunForked, RunMoved


def moved_entry(e: RunMoved) -> tuple[str, str, str]:
    """The transcript's entry: the move's note as the worker that claimed it wrote it
    ("resumed on host-b after host-a's lease expired 3s ago"), and what it went on from."""
    was = f"; {e.was} held it before" if e.was else ""
    body = (
        f"rebuilt from its log through event {e.after_seq} (nothing in it run again),"
        f" then went on live on {e.host} under lease epoch {e.epoch}{was}"
    )
    return "note", f"moved · {e.note}", body


def forked_entry(e: RunForked) -> tuple[str, str, str]:
    """The transcript's entry: where the fork came from and what it changed ("forked from
    RUN at CALL; model M / script S / a message to the agent")."""
    changed = " / ".join(e.changed) if e.changed else "nothing changed"
    restored = (
        "its env is in the state the run saw there"
        if e.state_restored
        else "its env is not in the state the run saw there: the grants given before the"
        " fork are revoked, so nothing approved then runs unasked"
    )
    body = (
        f"the run's events through {e.through_seq} rebuilt, its model's replies served again"
        f" (no call, no cost); {restored}"
    )
    return "goal", f"forked from {e.source} at {e.at_call}; {changed}", body


def forked_words(e: RunForked) -> str:
    """What the header says of a fork: "fork of RUN at CALL"."""
    return f"fork of {e.source} at {e.at_call}"


def move_words(e: RunMoved) -> str:
    """The header's last move, its host said apart: "resumed after host-a's lease expired
    3s ago" ("resumed on host-b after …" with `on host-b` taken out)."""
    return e.note.replace(f" on {e.host}", "", 1) if e.host else e.note
