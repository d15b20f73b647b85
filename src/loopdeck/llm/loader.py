"""Importing LiteLLM once, offline: the local cost map, no telemetry, quiet logs."""

from __future__ import annotations

import logging
import os
from functools import cache
from typing import Any

from loopdeck.tuning import collector


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
    return litellm
