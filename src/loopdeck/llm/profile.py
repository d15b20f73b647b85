"""What a model can carry, from LiteLLM's model map, overridable in `scenario.toml`."""

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
            "max_input_tokens": info.get("max_input_tokens"),
            "known_price": info.get("input_cost_per_token") is not None,
        }
    return ModelProfile.model_validate({**found, **(overrides or {})})
