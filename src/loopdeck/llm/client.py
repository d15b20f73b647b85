"""The runtime's ModelClient over `litellm.acompletion`, scripted or real."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from loopdeck.core.model import ModelReply, ModelRequest, ProviderError, RawToolCall
from loopdeck.core.scenario import Script, ScriptedPrice
from loopdeck.core.text import capped
from loopdeck.llm.loader import litellm_module, loaded
from loopdeck.llm.profile import ModelProfile, profile_for
from loopdeck.llm.prompt_program import check_layers, compile_request
from loopdeck.llm.script_player import prompt_tokens
from loopdeck.llm.scripted_provider import PROVIDER, ensure_registered, register_script
from loopdeck.tuning import collector

SCRIPTED = "scripted"

_RETRYABLE = (
    "RateLimitError",
    "Timeout",
    "APIConnectionError",
    "InternalServerError",
    "ServiceUnavailableError",
)


# The provider's words, not LiteLLM's traceback of where it failed to read them.
PROVIDER_TEXT_CAP = 1000
_TRACEBACK = "Traceback (most recent call last)"


def classify(exc: Exception) -> ProviderError:
    """Map a LiteLLM exception to retryable or not, keeping the provider's message."""
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if _nested_too_deep(exc):
        # LiteLLM's reading of the reply (`json.loads` of its tool arguments) hit Python's
        # recursion limit; what it says then is a page of traceback.
        return ProviderError(
            f"{name}: the model's reply is nested deeper than about "
            f"{sys.getrecursionlimit():,} levels, too deep to read",
            retryable=False,
            status=status,
        )
    text = f"{name}: {_provider_text(exc)}"
    if name == "ContextWindowExceededError":
        return ProviderError(text, retryable=False, status=status, context_overflow=True)
    retryable = name in _RETRYABLE or (isinstance(status, int) and status >= 500)
    if name in ("BadRequestError", "AuthenticationError", "PermissionDeniedError", "NotFoundError"):
        retryable = False
    return ProviderError(text, retryable=retryable, status=status)


def _nested_too_deep(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(20):  # a chain of causes, bounded
        if seen is None:
            break
        if isinstance(seen, RecursionError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "maximum recursion depth exceeded" in str(exc)


def _provider_text(exc: Exception) -> str:
    """What the provider said, without LiteLLM's repeats of the class name that `classify`
    puts first ("litellm.AuthenticationError: AuthenticationError: …")."""
    text = str(exc)
    name = type(exc).__name__
    while said := next((p for p in (f"litellm.{name}:", f"{name}:") if text.startswith(p)), ""):
        text = text.removeprefix(said).lstrip()
    cut = text.find(_TRACEBACK)
    if cut >= 0:
        text = text[:cut].rstrip() + " (LiteLLM's traceback left out)"
    return capped(text, PROVIDER_TEXT_CAP)


class MissingCredentials(Exception):
    """The provider's key is not in the environment; raised before the run starts."""


def unroutable(model: str, api_base: str | None) -> str | None:
    """Why LiteLLM would send `model` to no provider at all, known before anything starts;
    None when it can. A name under a provider LiteLLM knows is left to the first call: some
    providers' routing asks the provider itself (a login, a device code)."""
    if model == SCRIPTED:
        return None
    litellm = litellm_module()
    prefix, slash, _ = model.partition("/")
    if slash and prefix in litellm.provider_list:
        return None
    try:
        litellm.get_llm_provider(model=model, api_base=api_base)
    except litellm.BadRequestError:  # LiteLLM's one error for a model it routes nowhere
        return (
            "LiteLLM knows no provider for it; name one as PROVIDER/MODEL"
            f" (openai/{model.rpartition('/')[2]} for an OpenAI-compatible server)"
        )
    return None


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
        self.script_key: str | None = None
        if model == SCRIPTED:
            if script is None:
                raise ValueError("the scripted model needs a script (--script NAME)")
            self.script_key = register_script(script, owner=self)
            self.profile = ModelProfile(model=model, tool_calling=True, **(profile_overrides or {}))
        else:
            self.profile = profile_for(model, profile_overrides)
        check_layers(self.profile, temperature)
        self.context_window: int | None = self.profile.max_input_tokens

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        if self.script_key is not None:
            return prompt_tokens(messages, [])
        litellm = litellm_module()
        try:
            return int(litellm.token_counter(model=self.name, messages=messages))
        except Exception:  # no tokenizer for this model: estimate
            return prompt_tokens(messages, [])

    def request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        kwargs = compile_request(request, self.profile, temperature=self.temperature)
        # Retries happen once, in the runtime, where each one is an event the operator sees.
        kwargs |= {"timeout": request.timeout_s, "num_retries": 0, "max_retries": 0}
        if self.script_key is not None:
            ensure_registered()
            kwargs["model"] = f"{PROVIDER}/{request.role}"
            kwargs["metadata"] = {
                "loopdeck_script": self.script_key,
                # The provider prices its own reply (LiteLLM takes a stamped cost as it is).
                # Not as `input_cost_per_token=`: LiteLLM would build a price entry of its own
                # for every call from those (7 % of a call's CPU) and never read it.
                "loopdeck_price": (
                    self.price.input_per_million / 1e6,
                    self.price.output_per_million / 1e6,
                ),
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
        # LiteLLM prices every response as it returns it (the scripted one at the script's
        # per-token price, passed with the call): read that instead of pricing it twice.
        hidden = getattr(response, "_hidden_params", None) or {}
        priced = hidden.get("response_cost")
        if isinstance(priced, int | float) and (self.script_key or self.profile.known_price):
            return float(priced)
        try:
            if self.script_key is not None:
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

    async def prepare(self) -> None:
        """Import LiteLLM off the event loop, before the run's clock and first timeout; once
        a process has it, a run starts with no hand-over to a thread for it."""
        if not loaded():
            await asyncio.to_thread(litellm_module)

    async def complete(self, request: ModelRequest) -> ModelReply:
        litellm = litellm_module()
        kwargs = self.request_kwargs(request)
        started = time.perf_counter()
        try:
            with collector.during_model_call():
                response = await litellm.acompletion(**kwargs)
        except Exception as exc:  # every provider failure is classified, none is swallowed
            raise classify(exc) from exc
        latency_ms = (time.perf_counter() - started) * 1000
        message = _first_message(response)
        try:
            calls = [
                RawToolCall(
                    id=str(c.id or f"call_{i}"),
                    name=str(c.function.name or ""),
                    arguments=_arguments_text(c.function.arguments),
                )
                for i, c in enumerate(message.tool_calls or [])
            ]
        except (AttributeError, TypeError) as exc:
            raise ProviderError(
                f"malformed tool calls in the response: {exc}", retryable=True
            ) from exc
        content = message.content
        if content is not None and not isinstance(content, str):
            content = json.dumps(content, default=str)
        reported = reported_tokens(response, scripted=self.script_key is not None)
        # A reply that says no tokens has no price either: LiteLLM's $0 for it is not a cost.
        prompt, completion = reported or (None, None)
        return ModelReply(
            model=str(getattr(response, "model", None) or self.name),
            content=content,
            tool_calls=calls,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_usd=None if reported is None else self._cost(litellm, response),
            latency_ms=latency_ms,
        )


def reported_tokens(response: Any, scripted: bool = False) -> tuple[int, int] | None:
    """The reply's (prompt, completion) tokens as its provider said them; None when it said
    none. LiteLLM fills a reply that carries no `usage` with zeros, and no real model call
    spends no prompt tokens: all zeros from a provider is nothing said, unknown (never 0).
    A scripted reply's figures are the script's own, zeros included."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    prompt = getattr(usage, "prompt_tokens", None)
    completion = getattr(usage, "completion_tokens", None)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    if prompt == 0 and completion == 0 and not scripted:
        return None
    return prompt, completion


def _first_message(response: Any) -> Any:
    """The reply's message; a response with none is the provider's failure, retried."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise ProviderError(
            f"the provider returned no choices ({type(response).__name__})", retryable=True
        )
    message = getattr(choices[0], "message", None)
    if message is None:
        raise ProviderError("the provider's first choice has no message", retryable=True)
    return message


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, default=str)
