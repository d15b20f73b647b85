"""Python's cyclic collector, tuned for what loopdeck allocates.

A model call through LiteLLM copies the whole conversation twice (see
`llm.litellm_passes`): at 500 messages that is thousands of short-lived objects a call, and a
console frame allocates about 100,000 (strips, segments). Collected every 700 allocations
(Python's default), a call ran several young collections that caught its copies alive and
promoted them, and their cost grew with the conversation: 0.2 ms of a 2 ms call at 500
messages. Every 20,000 allocations they die young instead; the older generations are collected
less often (a full collection every 10,000,000 allocations at most). Modules are frozen once
LiteLLM is imported (`llm.loader` says when, `imported`), so a full collection walks only what
a run holds. None of this is done unless an entry point asks (`loopdeck.tuning`): an embedder's
process keeps Python's thresholds and freezes nothing.

The collector can also be held off for a while (`held`, `hold`/`release`): during a model call
when a console watches (`during_model_call`), while a link reads a long history. Holds nest
and overlap (a fleet's runs, a link's batches), from any thread: the collector is given back
when the last one ends, and only if it was on when the first began. While holds overlap for
longer than `MAX_HELD_S`, the next hold or release collects the young generations itself, so
cyclic garbage never waits longer than the slowest single hold. A hold changes nothing once
it is over; with `LOOPDECK_TUNING=off` there are none (`never_hold`).
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator

THRESHOLDS = (20_000, 5, 100)
# The console's: its pauses are what an operator sees (a frame late, a key slow). With model
# calls holding the collector (`held`), the young generation no longer catches LiteLLM's
# copies, so it can be collected often and briefly: at most a few thousand objects (~5 ms)
# where 20,000 took up to 30 ms. See ARCHITECTURE.md, Memory and the collector.
CONSOLE_THRESHOLDS = (5_000, 10, 100)
PYTHON_DEFAULTS = (700, 10, 10)


def tune() -> bool:
    """Set loopdeck's thresholds, unless the process has chosen its own: an embedder that set
    thresholds keeps them. True if they were set."""
    if gc.get_threshold() != PYTHON_DEFAULTS:
        return False
    gc.set_threshold(*THRESHOLDS)
    return True


# What an entry point asked to be done once LiteLLM is imported (by name: asked once each).
_after_import: dict[str, Callable[[], object]] = {}
_imported = False


def when_imported(name: str, step: Callable[[], object]) -> None:
    """Do `step` once LiteLLM is imported (`imported`), or now if it is; once per name."""
    if name in _after_import:
        return
    _after_import[name] = step
    if _imported:
        step()


def imported() -> None:
    """Said by `llm.loader` once LiteLLM's import is over (under its hold): the steps asked."""
    global _imported
    _imported = True
    for step in list(_after_import.values()):
        step()


MAX_HELD_S = 2.0
_model_calls_hold = False
_holding = True

_lock = threading.Lock()
_holds = 0
_give_back = False
_held_since = 0.0


def never_hold() -> None:
    """No hold holds the collector from now on (`LOOPDECK_TUNING=off`)."""
    global _holding
    _holding = False


def hold() -> None:
    global _holds, _give_back, _held_since
    if not _holding:
        return
    with _lock:
        if _holds == 0:
            _give_back = gc.isenabled()
            _held_since = time.monotonic()
            gc.disable()
        else:
            _collect_if_held_too_long()
        _holds += 1


def release() -> None:
    global _holds
    with _lock:
        if _holds == 0 and not _holding:
            return  # held by nobody since `never_hold`
        if _holds == 0:
            raise RuntimeError("the collector was released more often than held")
        _holds -= 1
        if _holds:
            _collect_if_held_too_long()
        elif _give_back:
            gc.enable()


def _collect_if_held_too_long() -> None:
    global _held_since
    now = time.monotonic()
    if now - _held_since > MAX_HELD_S:
        gc.collect(1)
        _held_since = now


class Hold:
    """One holder's hold, taken and given back any number of times (a link holds while it
    reads full batches of history): only the first `hold` holds, only the first `release`
    after it releases."""

    def __init__(self) -> None:
        self._holding = False

    @property
    def holding(self) -> bool:
        return self._holding

    def hold(self) -> None:
        if not self._holding:
            hold()
            self._holding = True

    def release(self) -> None:
        if self._holding:
            self._holding = False
            release()


@contextlib.contextmanager
def held() -> Iterator[None]:
    hold()
    try:
        yield
    finally:
        release()


def hold_during_model_calls(on: bool = True) -> None:
    """Model calls hold the collector from now on (the console's choice: there a collection
    inside a call, walking LiteLLM's copies of the conversation, is a late frame or a slow
    key). A headless run lets collections fall where they fall: it has no one to keep waiting,
    and at 200 steps holding made it 2-5% slower (three A/B pairs)."""
    global _model_calls_hold
    _model_calls_hold = on


def during_model_call() -> contextlib.AbstractContextManager[None]:
    return held() if _model_calls_hold else contextlib.nullcontext()
