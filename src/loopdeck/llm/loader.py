"""Importing LiteLLM once, offline: the local cost map, no telemetry, quiet logs."""

from __future__ import annotations

import gc
import logging
import os
from functools import cache
from typing import Any

from loopdeck import collector


@cache
def litellm_module() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    # LiteLLM's success logging copies every message of every call to cut base64 images
    # short for its log callbacks: a walk that grows with the conversation and ran on the
    # caller's event loop. loopdeck sends no images (text and tool JSON only), so the walk
    # finds nothing; 0 turns it off. Cost, usage and error mapping do not depend on it.
    os.environ.setdefault("MAX_BASE64_LENGTH_FOR_LOGGING", "0")
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    litellm.drop_params = False
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # LiteLLM walks the whole conversation four times a call; these passes do the same work
    # for less per message (see litellm_passes), so a call's cost barely grows with history.
    from loopdeck.llm import litellm_passes

    litellm_passes.install()
    # LiteLLM, pydantic and Textual leave ~400,000 objects that live as long as the process.
    # Every full collection walked them all (~165 ms idle, over a second on a loaded machine),
    # stalling the console's loop. Frozen, they are skipped; a run's own objects are not.
    gc.freeze()
    # Each call copies the conversation three times: young collections every 700 allocations
    # made its cost grow with the conversation (see loopdeck.collector).
    collector.tune()
    return litellm
