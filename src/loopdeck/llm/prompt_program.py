"""The prompt as layers, compiled per model into one LiteLLM request.

Layers: instructions (the role's system text), tools, examples, context and task (the user
message's sections), and the output contract. A model with native tool calling gets the tools
as `tools=` and a contract that allows native calls; one without gets the tools as text, the
envelope-only contract, and its tool turns rewritten as plain messages.
"""

from __future__ import annotations

import json
from typing import Any

from loopdeck.core.decisions import DECISION_SCHEMA_TEXT
from loopdeck.core.model import ModelRequest
from loopdeck.llm.profile import ModelProfile, UnsupportedLayer

Message = dict[str, Any]

NATIVE_CONTRACT = (
    "Call one of the tools natively for the next step. To finish, ask the user or hand off, "
    "reply instead with exactly one JSON object: " + DECISION_SCHEMA_TEXT
)
ENVELOPE_ONLY_CONTRACT = "Reply with exactly one JSON object and nothing else: " + (
    DECISION_SCHEMA_TEXT
)


def _tools_as_text(tools: list[dict[str, Any]]) -> str:
    lines = ["ALLOWED_TOOLS (call one with the JSON decision envelope):"]
    for tool in tools:
        fn = tool["function"]
        lines.append(f"- {fn['name']}: {fn.get('description', '')}")
        lines.append(f"  arguments schema: {json.dumps(fn.get('parameters', {}), sort_keys=True)}")
    return "\n".join(lines)


def _plain(messages: list[Message]) -> list[Message]:
    """Tool-call turns as plain text, for a model that has no tool role."""
    out: list[Message] = []
    for message in messages:
        if message.get("role") == "tool":
            out.append({"role": "user", "content": message.get("content") or ""})
        elif message.get("role") == "assistant" and message.get("tool_calls"):
            calls = [
                {"tool_name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in message["tool_calls"]
            ]
            out.append({"role": "assistant", "content": json.dumps(calls)})
        else:
            out.append(message)
    return out


def compile_request(
    request: ModelRequest, profile: ModelProfile, *, temperature: float | None = None
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if temperature is not None:
        if not profile.temperature:
            raise UnsupportedLayer("temperature", profile.model, "the model takes no temperature")
        kwargs["temperature"] = temperature
    messages = list(request.messages)
    layers: list[str] = []
    if request.examples:
        layers.append("EXAMPLES\n" + "\n".join(f"- {example}" for example in request.examples))
    native = bool(request.tools) and profile.tool_calling
    if native:
        kwargs["tools"] = request.tools
        layers.append(f"OUTPUT CONTRACT\n{NATIVE_CONTRACT}")
    elif request.tools:
        layers.append(_tools_as_text(request.tools))
        layers.append(f"OUTPUT CONTRACT\n{ENVELOPE_ONLY_CONTRACT}")
    if layers:
        extra = "\n\n".join(layers)
        system = messages[0] if messages and messages[0].get("role") == "system" else None
        if system is not None:
            messages[0] = {**system, "content": f"{system.get('content', '')}\n\n{extra}"}
        else:
            messages.insert(0, {"role": "system", "content": extra})
    if request.tools and not native:
        messages = _plain(messages)
    kwargs["messages"] = messages
    return kwargs


def check_layers(profile: ModelProfile, temperature: float | None) -> None:
    """Fail before the run starts on a layer the model cannot carry."""
    compile_request(
        ModelRequest(role="executor", round=1, messages=[]), profile, temperature=temperature
    )
