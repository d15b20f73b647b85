"""What the run screen reads of a link beyond `RunLink`, by the link's own class: what a run
waits for before its first events (a local run, an attached one), an attached run's store
outage, its park and its long history, the failures its link tells while it goes on (and
what came of an attached run's commands), and its close.

A replay has none of these: each says so with its empty value.
"""

from __future__ import annotations

from collections.abc import Callable

from loopdeck.operator.links import LocalLink, RunLink
from loopdeck.operator.store_link import StoreLink

# Told of what failed ("stop not sent: …") and what it means for the run.
FailureListener = Callable[[str, str], None]


def phase(link: RunLink) -> str:
    """What the run waits for before its first events ("the model library (LiteLLM) to
    load"); empty for a replay."""
    return link.phase if isinstance(link, LocalLink | StoreLink) else ""


def store_outage(link: RunLink) -> str:
    """While an attached run's store cannot be read: "store unreachable since …"."""
    return link.store_outage if isinstance(link, StoreLink) else ""


def parked(link: RunLink) -> str:
    """While its worker parked an attached run (no worker holds it, it waits on its
    operator): the lease's note; "" for a run held, and for a local run or a replay."""
    return link.parked if isinstance(link, StoreLink) else ""


def workerless(link: RunLink) -> bool:
    """While an attached run is parked: no worker runs for its store (none will take it up
    until one starts); False otherwise."""
    return isinstance(link, StoreLink) and bool(link.parked) and link.workerless


def reading_history(link: RunLink) -> bool:
    """An attached run's long history is being read: frames show progress, not each batch."""
    return isinstance(link, StoreLink) and link.reading_history


def hear_now(link: RunLink) -> None:
    """A local run's news still on its way to this loop heard now (`LocalLink.hear_now`)."""
    if isinstance(link, LocalLink):
        link.hear_now()


def folds(link: RunLink) -> None:
    """The screen will say when it folded what the link hands out (`folded`)."""
    if isinstance(link, StoreLink):
        link.folds = True


def folded(link: RunLink) -> None:
    """The screen folded what the link handed out (`StoreLink.folded`: a history's hold ends)."""
    if isinstance(link, StoreLink):
        link.folded()


def on_failure(
    link: RunLink, listener: FailureListener, told: Callable[[str], None] | None = None
) -> Callable[[], None] | None:
    """What the link tells of its failures while the run goes on (a local run's recording, an
    attached run's commands) and, `told`, what came of an attached run's stop, kill or
    message once its store took it (`tells_what_came`); returns how to stop listening, None
    for a replay."""
    if isinstance(link, StoreLink) and told is not None:
        stops = (link.on_failure(listener), link.on_told(told))

        def stop_both() -> None:
            for stop in stops:
                stop()

        return stop_both
    if isinstance(link, LocalLink | StoreLink):
        return link.on_failure(listener)
    return None


def tells_what_came(link: RunLink) -> bool:
    """The link says what came of a stop, a kill or a message once it landed (an attached
    run's: its store checks whether a runner will hear it); the screen says nothing first."""
    return isinstance(link, StoreLink)


async def close(link: RunLink) -> None:
    """An attached run's link stops following the store; the others have nothing to close."""
    if isinstance(link, StoreLink):
        await link.close()
