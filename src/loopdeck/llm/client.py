"""The runtime's ModelClient over `litellm.acompletion`, scripted or real."""

from __future__ import annotations

import time
from typing import Any

from loopdeck.core.model import ModelReply, ModelRequest, ProviderError, RawToolCall
from loopdeck.core.scenario import Script, ScriptedPrice
from loopdeck.llm.loader import litellm_module
from loopdeck.llm.profile import ModelProfile, profile_for
from loopdeck.llm.prompt_program import check_layers, compile_request
from loopdeck.llm.script_player import count_tokens, prompt_text
from loopdeck.llm.scripted_provider import PROVIDER, ensure_registered, register_script

SCRIPTED = "scripted"

_RETRYABLE = (
    "RateLimitError",
    "Timeout",
    "APIConnectionError",
    "InternalServerError",
    "ServiceUnavailableError",
)


def classify(exc: Exception) -> ProviderError:
    """Map a LiteLLM exception to retryable or not, keeping the provider's message."""
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if name == "ContextWindowExceededError":
        return ProviderError(
            f"{name}: {exc}", retryable=False, status=status, context_overflow=True
        )
    retryable = name in _RETRYABLE or (isinstance(status, int) and status >= 500)
    if name in ("BadRequestError", "AuthenticationError", "PermissionDeniedError", "NotFoundError"):
        retryable = False
    return ProviderError(f"{name}: {exc}", retryable=retryable, status=status)


class MissingCredentials(Exception):
    """The provider's key is not in the environment; raised before the run starts."""


def check_credentials(model: str, api_base: str | None) -> None:
    if model == SCRIPTED:
        return
    litellm = litellm_module()
    try:
        found = litellm.validate_environment(model=model, api_base=api_base)
    except Exception:  # an unknown provider: LiteLLM cannot tell, the first call will
        return
    missing = found.get("missing_keys") or []
    if missing and not found.get("keys_in_environment"):
        raise MissingCredentials(
            f"{model} needs {', '.join(missing)} in the environment (none is set); "
            "local OpenAI-compatible servers accept any non-empty key"
        )


class LiteLLMModel:
    """A model reached through LiteLLM. `scripted` plays the env's script offline."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        script: Script | None = None,
        price: ScriptedPrice | None = None,
        react: bool = False,
        profile_overrides: dict[str, Any] | None = None,
        temperature: float | None = None,
    ) -> None:
        self.name = model
        self.api_base = api_base
        self.react = react
        self.price = price or ScriptedPrice()
        self.temperature = temperature
        self._script_key: str | None = None
        if model == SCRIPTED:
            if script is None:
                raise ValueError("the scripted model needs a script (--script NAME)")
            self._script_key = register_script(script)
            self.profile = ModelProfile(model=model, tool_calling=True, **(profile_overrides or {}))
        else:
            self.profile = profile_for(model, profile_overrides)
        check_layers(self.profile, temperature)
        self.context_window: int | None = self.profile.max_input_tokens

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        if self._script_key is not None:
            return count_tokens(prompt_text(messages, []))
        litellm = litellm_module()
        try:
            return int(litellm.token_counter(model=self.name, messages=messages))
        except Exception:  # no tokenizer for this model: estimate
            return count_tokens(prompt_text(messages, []))

    def _request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        kwargs = compile_request(request, self.profile, temperature=self.temperature)
        # Retries happen once, in the runtime, where each one is an event the operator sees.
        kwargs |= {"timeout": request.timeout_s, "num_retries": 0, "max_retries": 0}
        if self._script_key is not None:
            ensure_registered()
            kwargs["model"] = f"{PROVIDER}/{request.role}"
            kwargs["metadata"] = {
                "loopdeck_script": self._script_key,
                "loopdeck_role": request.role,
                "loopdeck_round": request.round,
                "loopdeck_react": self.react,
            }
        else:
            kwargs["model"] = self.name
            if self.api_base:
                kwargs["api_base"] = self.api_base
        return kwargs

    def _cost(self, litellm: Any, response: Any) -> float | None:
        try:
            if self._script_key is not None:
                return float(
                    litellm.completion_cost(
                        completion_response=response,
                        custom_cost_per_token={
                            "input_cost_per_token": self.price.input_per_million / 1e6,
                            "output_cost_per_token": self.price.output_per_million / 1e6,
                        },
                    )
                )
            if not self.profile.known_price:
                return None
            return float(litellm.completion_cost(completion_response=response, model=self.name))
        except Exception:  # LiteLLM raises when the model has no known price: cost is unknown
            return None

    async def complete(self, request: ModelRequest) -> ModelReply:
        litellm = litellm_module()
        kwargs = self._request_kwargs(request)
        started = time.perf_counter()
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as exc:  # every provider failure is classified, none is swallowed
            raise classify(exc) from exc
        latency_ms = (time.perf_counter() - started) * 1000
        message = response.choices[0].message
        calls = [
            RawToolCall(id=c.id, name=c.function.name or "", arguments=c.function.arguments or "")
            for c in (message.tool_calls or [])
        ]
        usage = getattr(response, "usage", None)
        return ModelReply(
            model=str(response.model or self.name),
            content=message.content,
            tool_calls=calls,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            cost_usd=self._cost(litellm, response),
            latency_ms=latency_ms,
        )
