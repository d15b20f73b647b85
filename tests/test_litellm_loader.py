"""LiteLLM's first-call setup is done with its import (issue 43): a run's first model call
imports nothing, so neither the run's clock nor a console's loop pays for it."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from loopdeck.llm import loader

FIRST_CALL = """
import asyncio, json, sys
from loopdeck.core.model import ModelRequest
from loopdeck.core.scenario import Script, ScriptTurn
from loopdeck.llm.client import LiteLLMModel
from loopdeck.llm.loader import litellm_module

litellm_module()
model = LiteLLMModel("scripted", script=Script(executor=[ScriptTurn(tool="poll", repeat=True)]))
tools = [{"type": "function", "function": {"name": "poll", "parameters": {"type": "object"}}}]
request = ModelRequest(
    role="executor", round=1, messages=[{"role": "user", "content": "go"}], tools=tools
)
before = set(sys.modules)
reply = asyncio.run(model.complete(request))
print(json.dumps({"new": sorted(set(sys.modules) - before), "tool": reply.tool_calls[0].name}))
"""


@pytest.mark.slow  # a fresh interpreter importing LiteLLM: 3-9 s
def test_the_first_model_call_after_the_import_imports_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FIRST_CALL], capture_output=True, text=True, check=True
    )
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["tool"] == "poll"
    assert said["new"] == []  # LiteLLM's proxy types, tiktoken's encoding: loaded already


def test_a_litellm_that_refuses_the_head_start_is_said_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Refusing:
        def completion(self, **kwargs: object) -> None:
            raise RuntimeError("mock_response is gone")

    with caplog.at_level(logging.INFO, logger="loopdeck.llm"):
        loader.first_call_ahead(Refusing())
    assert "left to the first call: mock_response is gone" in caplog.text
