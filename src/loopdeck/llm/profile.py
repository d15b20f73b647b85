"""What a model can carry, from LiteLLM's model map, overridable in `scenario.toml`.

Its window (`max_input_tokens`) keeps a long run's conversation inside it
(`core/compaction.py`): a model LiteLLM knows gets its window without the scenario saying it,
from `get_model_info`, or from the map itself (`model_cost`) for a name that function does not
resolve (an entry under the name as given, or under the name without its provider prefix when
the entry is that provider's). A model nobody knows has no window: nothing is guessed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from loopdeck.llm.loader import litellm_module


class ModelProfile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    tool_calling: bool = False
    json_schema: bool = False
    temperature: bool = True
    max_input_tokens: int | None = None
    known_price: bool = False


class UnsupportedLayer(Exception):
    """A prompt layer this model cannot carry; raised before any request is sent."""

    def __init__(self, layer: str, model: str, why: str) -> None:
        super().__init__(f"{model} cannot carry the {layer} layer: {why}")
        self.layer = layer
        self.model = model


def profile_for(model: str, overrides: dict[str, Any] | None = None) -> ModelProfile:
    litellm = litellm_module()
    found: dict[str, Any] = {"model": model}
    try:
        info = litellm.get_model_info(model)
    except Exception:  # LiteLLM raises for models it has not mapped: nothing is known of it
        info = None
    if info:
        params = set(litellm.get_supported_openai_params(model) or [])
        found |= {
            "tool_calling": bool(info.get("supports_function_calling")),
            "json_schema": bool(info.get("supports_response_schema")),
            "temperature": "temperature" in params if params else True,
            "max_input_tokens": _window(info),
            "known_price": info.get("input_cost_per_token") is not None,
        }
    if found.get("max_input_tokens") is None:
        found["max_input_tokens"] = _window(_map_entry(litellm.model_cost, model))
    return ModelProfile.model_validate({**found, **(overrides or {})})


def _map_entry(table: dict[str, Any], model: str) -> dict[str, Any] | None:
    """The model's entry in LiteLLM's map: under its name, or under the name without its
    provider prefix if that entry is the same provider's (`bedrock_converse/writer…`)."""
    entry = table.get(model)
    if entry is None and "/" in model:
        provider, bare = model.split("/", 1)
        entry = table.get(bare)
        if not isinstance(entry, dict) or entry.get("litellm_provider") != provider:
            entry = None
    return entry if isinstance(entry, dict) else None


def _window(info: Any) -> int | None:
    window = info.get("max_input_tokens") if info else None
    return window if isinstance(window, int) and window > 0 else None
