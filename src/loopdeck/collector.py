"""Python's cyclic collector, tuned for what loopdeck allocates.

A model call through LiteLLM copies the whole conversation three times (see
`llm.litellm_passes`): at 500 messages that is thousands of short-lived objects a call, and a
console frame allocates about 100,000 (strips, segments). Collected every 700 allocations
(Python's default), a call ran several young collections that caught its copies alive and
promoted them, and their cost grew with the conversation: 0.2 ms of a 2 ms call at 500
messages. Every 20,000 allocations they die young instead; the older generations are collected
less often (a full collection every 10,000,000 allocations at most). Modules are frozen once
LiteLLM is imported (`llm.loader`), so a full collection walks only what a run holds.
"""

from __future__ import annotations

import gc

THRESHOLDS = (20_000, 5, 100)
PYTHON_DEFAULTS = (700, 10, 10)


def tune() -> bool:
    """Set loopdeck's thresholds, unless the process has chosen its own: an embedder that set
    thresholds keeps them. True if they were set."""
    if gc.get_threshold() != PYTHON_DEFAULTS:
        return False
    gc.set_threshold(*THRESHOLDS)
    return True
