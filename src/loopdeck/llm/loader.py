"""Importing LiteLLM once, offline: the local cost map, no telemetry, quiet logs."""

from __future__ import annotations

import logging
import os
from functools import cache
from typing import Any

from loopdeck.tuning import collector

log = logging.getLogger("loopdeck.llm")


@cache
def litellm_module() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    # LiteLLM's success logging copies every message of every call to cut base64 images
    # short for its log callbacks: a walk that grows with the conversation and ran on the
    # caller's event loop. loopdeck sends no images (text and tool JSON only), so the walk
    # finds nothing; 0 turns it off. Cost, usage and error mapping do not depend on it.
    os.environ.setdefault("MAX_BASE64_LENGTH_FOR_LOGGING", "0")
    # The import makes ~400,000 objects that live as long as the process, and the collector
    # walked them all five times over while it ran (full collections of 50-180 ms: 0.7 s of a
    # 2.2 s import). It is held until the import is over, and the hold undone after it; the
    # import leaves next to no garbage (a few hundred objects, kept). What an entry point
    # asked for then (the console: freeze them out of every walk) is done under the same
    # hold (`loopdeck.tuning.collector.imported`); an embedder asked for nothing.
    with collector.held():
        try:
            litellm = _import_litellm()
        finally:
            collector.imported()
    return litellm


def loaded() -> bool:
    """True once `litellm_module` has imported LiteLLM in this process."""
    return litellm_module.cache_info().currsize > 0


def _import_litellm() -> Any:
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    litellm.drop_params = False
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # LiteLLM walks the whole conversation three times a call; these passes do the same work
    # for less per message (see litellm_passes), so a call's cost barely grows with history.
    from loopdeck.llm import litellm_passes

    litellm_passes.install()
    first_call_ahead(litellm)
    return litellm


def first_call_ahead(litellm: Any) -> None:
    """What LiteLLM does on its first call in a process, done here, with the import: ~0.9 s
    of imports (its proxy's types, hundreds of pydantic classes) and tiktoken's default
    encoding, which its custom providers are handed. Made on the first call, it was the
    run's first step (on its clock, inside its timeout) and, under a console, the worker
    thread holding the interpreter's lock in long stretches while the console's loop waited,
    then its collector walking the new classes there. Here it is off the loop, before any
    clock, and under the import's collector hold (frozen with LiteLLM's modules where an
    entry point asked for that). A canned reply (`mock_response`, nothing sent; `no-log`:
    no callback hears of it) and a token count, both LiteLLM's public calls; should either
    fail, the first call does it, as before, and the log says why."""
    try:
        litellm.completion(
            model="openai/gpt-4o-mini",
            messages=[{"role": "user", "content": "loopdeck: warm-up"}],
            mock_response="ok",
            **{"no-log": True},
        )
        litellm.token_counter(model="", text="loopdeck: warm-up")
    except Exception as exc:  # LiteLLM changed: nothing is lost but the head start
        log.info("LiteLLM's first-call setup is left to the first call: %s", exc)
