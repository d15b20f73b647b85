"""Whether an asyncio loop has nothing else to do: a console's loop waits for env code only then.

`core.env_thread` lets the loop block for quick env code (`QUICK_WAIT_S`); under a console it
blocks only when its loop would sleep anyway: no callback ready, no timer due within the wait
(blocking regardless made frames and keys wait, see `core.env_thread`). asyncio has no public
way to ask that: its ready queue and timers are `BaseEventLoop._ready` and `._scheduled`, and
no accessor exists (uvloop, asked for one, has none either). `nothing_else_due` reads them,
here and nowhere else, for the loops a console's link hands it, and only where they have the
shape it was written against (a deque of handles; a heap list of timer handles, the earliest
first). Any other loop is never blocked on, and that is said once in the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

log = logging.getLogger(__name__)
_refused: set[type] = set()  # the loop classes already said to be never blocked on


def refusal(loop: asyncio.AbstractEventLoop) -> str | None:
    """Why this loop's queues cannot be read (another implementation), if they cannot."""
    ready, timers = getattr(loop, "_ready", None), getattr(loop, "_scheduled", None)
    if not isinstance(ready, deque) or not isinstance(timers, list):
        return f"{type(loop).__qualname__} keeps no ready deque and timer heap as asyncio's do"
    if timers and not isinstance(timers[0], asyncio.TimerHandle):
        return f"{type(loop).__qualname__}'s timers are not asyncio's TimerHandles"
    return None


def nothing_else_due(loop: asyncio.AbstractEventLoop, seconds: float) -> bool:
    """True if `loop` has no callback ready and no timer due within `seconds`: it would sleep
    in its selector anyway. False for a loop whose queues are not asyncio's (`refusal`)."""
    reason = refusal(loop)
    if reason is not None:
        if type(loop) not in _refused:
            _refused.add(type(loop))
            log.info("env code is never waited for on this loop: %s", reason)
        return False
    ready: deque[object] = loop._ready  # type: ignore[attr-defined]
    timers: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]
    if ready:
        return False
    return not timers or timers[0].when() > loop.time() + seconds
