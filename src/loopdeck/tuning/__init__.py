"""Interpreter tuning, fenced off in one place and applied only by loopdeck's own entry points.

What loopdeck changes in the interpreter it runs in, and only where its command line owns the
process: the console's commands (`console`, `run`, `attach`, `replay`) call `for_console`,
`run --headless` calls `for_headless`. Building the console's app, importing LiteLLM or running
a `Runtime` changes nothing lasting: an embedder's interpreter keeps its collector thresholds,
freezes nothing, keeps its switch interval, and Textual stays as it ships.

- `collector`: the cyclic collector's thresholds, holds during model calls, LiteLLM's modules
  frozen out of every walk once imported.
- `lock_switching`: how long a thread keeps the interpreter's lock, and LiteLLM's pool giving
  it way to the console's loop.
- `console_first`: while the console's loop is awake the runs' loop waits at the start of its
  turn; applied when a run starts from the console's loop, on the thread that took the
  console's terms (`lock_switching.for_console`), so `LOOPDECK_TUNING=off` leaves it off too.
- `textual_cycles`, `strip_caches`: Textual's strips and LRU caches without reference cycles,
  their caches made on first use.

Each is applied only where it was measured or written for (`guards`): the collector's and the
switch interval's on Python 3.11; each Textual patch over the Textual it was written against.
Anything else is refused: one line each, logged (`logging`, "loopdeck.tuning") and returned.
`LOOPDECK_TUNING=off` applies none of it. The modules import no Textual until a patch is asked
for: `operator` and `llm` use the collector's holds.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass

from loopdeck import settings
from loopdeck.tuning import collector, lock_switching
from loopdeck.tuning.guards import python_refusal

SWITCH = "LOOPDECK_TUNING"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tuning:
    name: str
    refusal: Callable[[], str | None]  # None: apply it; else why not
    apply: Callable[[], object]


def _textual_cycles_refusal() -> str | None:
    from loopdeck.tuning import textual_cycles

    return textual_cycles.refusal()


def _textual_cycles() -> None:
    from loopdeck.tuning import textual_cycles

    textual_cycles.install()


def _strip_caches_refusal() -> str | None:
    from loopdeck.tuning import strip_caches

    return strip_caches.refusal()


def _strip_caches() -> bool:
    from loopdeck.tuning import strip_caches

    return strip_caches.install()


def _freeze_after_import() -> None:
    collector.when_imported("freeze", gc.freeze)


def _tune_after_import() -> None:
    collector.when_imported("thresholds", collector.tune)


FROZEN = Tuning("LiteLLM's modules frozen out of collections", python_refusal, _freeze_after_import)
CONSOLE: tuple[Tuning, ...] = (
    Tuning(
        "collector thresholds",
        python_refusal,
        lambda: gc.set_threshold(*collector.CONSOLE_THRESHOLDS),
    ),
    Tuning("collector held during model calls", python_refusal, collector.hold_during_model_calls),
    FROZEN,
    Tuning("switch interval", python_refusal, lock_switching.for_console),
    Tuning("Textual strips without cycles", _textual_cycles_refusal, _textual_cycles),
    Tuning("Textual strip caches made on first use", _strip_caches_refusal, _strip_caches),
)
HEADLESS: tuple[Tuning, ...] = (
    Tuning("collector thresholds after LiteLLM's import", python_refusal, _tune_after_import),
    FROZEN,
)


def for_console() -> list[str]:
    """The console's tuning (its process is its own: a late frame or a slow key is what an
    operator sees). Returns one line per tuning refused, and why."""
    return _apply(CONSOLE)


def for_headless() -> list[str]:
    """A headless run's: the collector tuned once LiteLLM is imported (each model call
    copies the conversation twice, see `collector`), its modules frozen."""
    return _apply(HEADLESS)


def off() -> bool:
    return settings.current().tuning_off


def _apply(tunings: tuple[Tuning, ...]) -> list[str]:
    if off():
        collector.never_hold()
        line = f"{SWITCH}=off: no tuning applied, the interpreter is left as Python set it"
        log.info(line)
        return [line]
    refused = []
    for tuning in tunings:
        reason = tuning.refusal()
        if reason is None:
            tuning.apply()
            continue
        refused.append(f"{tuning.name}: refused, {reason}")
        log.info(refused[-1])
    return refused
