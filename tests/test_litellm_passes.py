"""loopdeck's passes over a conversation do what LiteLLM's own do (issue 11, target 1).

Each pass is compared with the LiteLLM function it replaces on generated conversations:
the same result, the same changes to what it was given, the same error.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from loopdeck.core.model import ModelRequest
from loopdeck.core.scenario import Script, ScriptTurn
from loopdeck.llm import litellm_passes
from loopdeck.llm.client import LiteLLMModel
from loopdeck.llm.loader import litellm_module

litellm_module()
from litellm.litellm_core_utils.prompt_templates.factory import (  # noqa: E402
    THOUGHT_SIGNATURE_SEPARATOR as SEPARATOR,
)


class PydanticCall(BaseModel):
    id: str
    type: str = "function"


class PydanticMessage(BaseModel):
    role: str
    content: str | None = None


class OddDict(dict[str, Any]):
    """A dict subclass: its copy and get are not dict's, so the passes hand it to LiteLLM."""


class OddRole(str):
    pass


text = st.text(max_size=12)
call_id = st.one_of(text, st.builds(lambda a, b: f"{a}{SEPARATOR}{b}", text, text), st.none())
plain_call = st.fixed_dictionaries(
    {"id": call_id, "type": st.just("function")},
    optional={"function": st.fixed_dictionaries({"name": text, "arguments": text})},
)
odd_call = st.one_of(
    st.builds(PydanticCall, id=text),
    st.builds(lambda c: OddDict(c), plain_call),
    st.integers(),
    st.none(),
)
calls = st.one_of(
    st.lists(plain_call, max_size=3),
    st.lists(st.one_of(plain_call, odd_call), max_size=3),
    st.none(),
    st.just("not a list"),
    st.tuples(plain_call),
)
part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
    st.fixed_dictionaries({"type": st.sampled_from(["image_url", "file", "video", "bogus"])}),
    st.fixed_dictionaries(
        {
            "type": st.just("file"),
            "file": st.fixed_dictionaries({"file_data": st.just("data:application/pdf;base64,AA")}),
        }
    ),
    st.integers(),
)
content = st.one_of(st.none(), text, st.lists(part, max_size=3), st.integers())
role = st.one_of(
    st.sampled_from(["system", "user", "assistant", "tool", "", "developer"]),
    st.none(),
    st.builds(OddRole, st.sampled_from(["assistant", "tool", "user"])),
)
plain_message = st.fixed_dictionaries(
    {},
    optional={
        "role": role,
        "content": content,
        "tool_calls": calls,
        "tool_call_id": call_id,
        "name": st.one_of(st.none(), text),
    },
)
odd_message = st.one_of(
    st.builds(lambda m: OddDict(m), plain_message),
    st.builds(PydanticMessage, role=st.sampled_from(["user", "assistant"]), content=text),
    st.integers(),
)
signed_id = st.builds(lambda a, b: f"{a}{SEPARATOR}{b}", text, text)
runtime_turn = st.one_of(  # the shape loopdeck sends, with Gemini-signed ids
    st.builds(
        lambda ids: {"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "poll", "arguments": "{}"}}
            for i in ids
        ]},
        st.lists(st.one_of(signed_id, text), min_size=1, max_size=2),
    ),
    st.builds(
        lambda i, c: {"role": "tool", "tool_call_id": i, "content": c},
        st.one_of(signed_id, text),
        text,
    ),
)  # fmt: skip
conversations = st.one_of(
    st.lists(plain_message, max_size=8),
    st.lists(st.one_of(plain_message, odd_message), max_size=6),
    st.lists(runtime_turn, max_size=6),
)


def outcome(function: Any, messages: list[Any], *args: Any) -> tuple[Any, Any, Any]:
    """What a call gives back (or raises), and what it left its argument as."""
    given_messages = copy.deepcopy(messages)
    try:
        result: Any = ("returned", function(given_messages, *args))
    except Exception as exc:  # the same error, named the same way
        result = ("raised", type(exc), str(exc))
    return result, given_messages, [type(m) for m in given_messages]


ALL = ["pdf", "success_log", "thought_signatures", "validate"]


def stock(name: str) -> Any:
    return litellm_passes.replaced(name)


@pytest.fixture(autouse=True, scope="module")
def passes_in_place() -> None:
    litellm_module()
    assert litellm_passes.installed() == ALL


@settings(max_examples=400, deadline=None)
@given(conversations)
def test_cutting_thought_signatures_gives_what_litellm_gives(messages: list[Any]) -> None:
    ours = outcome(litellm_passes.remove_thought_signatures, messages, SEPARATOR)
    theirs = outcome(stock("thought_signatures"), messages, SEPARATOR)
    assert ours == theirs
    if ours[0][0] == "returned":  # copies, never the caller's own dicts
        for message, original in zip(ours[0][1], messages, strict=True):
            assert message is not original or not isinstance(original, dict)


@settings(max_examples=400, deadline=None)
@given(conversations)
def test_validating_messages_gives_and_changes_what_litellm_does(messages: list[Any]) -> None:
    ours = outcome(litellm_passes.validate_and_fix_messages, messages)
    theirs = outcome(lambda m: stock("validate")(messages=m), messages)
    assert ours == theirs


@settings(max_examples=400, deadline=None)
@given(conversations)
def test_finding_pdf_parts_answers_as_litellm_does(messages: list[Any]) -> None:
    assert outcome(litellm_passes.messages_have_pdf, messages) == outcome(stock("pdf"), messages)


def test_litellm_calls_the_passes_in_place_of_its_own() -> None:
    main = importlib.import_module("litellm.main")
    thought_signatures = litellm_passes.in_place("thought_signatures")  # a private of LiteLLM's
    assert thought_signatures is litellm_passes.remove_thought_signatures
    assert main.validate_and_fix_openai_messages is litellm_passes.validate_and_fix_messages
    assert main.messages_have_pdf_file_part is litellm_passes.messages_have_pdf


async def test_a_call_through_the_passes_still_cuts_signatures_and_counts_usage() -> None:
    script = Script(executor=[ScriptTurn(tool="poll", args={"job": 1}, repeat=True)])
    model = LiteLLMModel("scripted", script=script)
    signed = f"c1{SEPARATOR}signature"
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "poll the job"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": signed, "type": "function", "function": {"name": "poll", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": signed, "content": "{}"},
    ]  # fmt: skip
    before = copy.deepcopy(history)
    reply = await model.complete(ModelRequest(role="executor", round=1, messages=history))
    assert reply.tool_calls[0].name == "poll"
    assert reply.prompt_tokens > 0 and reply.cost_usd is not None
    assert history == before  # LiteLLM changed its copies, not the run's conversation


class Handlers:
    """Counts the success logs LiteLLM builds: its handler, called as one is scheduled."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        logging = importlib.import_module("litellm.litellm_core_utils.litellm_logging")
        handler = logging.Logging.async_success_handler
        self.built = 0

        def counted(logging_obj: Any, *args: Any, **kwargs: Any) -> Any:
            self.built += 1
            return handler(logging_obj, *args, **kwargs)

        monkeypatch.setattr(logging.Logging, "async_success_handler", counted)


async def test_a_call_nobody_listens_to_builds_no_success_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from litellm.responses.streaming_iterator import drain_logging_tasks

    handlers = Handlers(monkeypatch)
    model = LiteLLMModel("scripted", script=Script(executor=[ScriptTurn(tool="poll")]))
    reply = await model.complete(ModelRequest(role="executor", round=1, messages=[
        {"role": "user", "content": "poll the job"}]))  # fmt: skip
    await drain_logging_tasks(30)  # what LiteLLM scheduled after the call has run
    assert reply.tool_calls[0].name == "poll"
    assert reply.cost_usd is not None  # priced as it returned, not by the log
    assert handlers.built == 0
    monkeypatch.setattr(litellm_passes, "_heard", lambda logging_obj: True)
    await model.complete(ModelRequest(role="executor", round=1, messages=[
        {"role": "user", "content": "poll the job"}]))  # fmt: skip
    await drain_logging_tasks(30)
    assert handlers.built == 1  # LiteLLM's own, when something may hear it


async def test_a_registered_callback_still_hears_every_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from litellm.integrations.custom_logger import CustomLogger

    litellm = litellm_module()
    heard = asyncio.Event()

    class Listener(CustomLogger):  # type: ignore[misc]
        async def async_log_success_event(self, *args: Any, **kwargs: Any) -> None:
            heard.set()

    listener = Listener()
    monkeypatch.setattr(litellm, "callbacks", [listener])
    handlers = Handlers(monkeypatch)
    try:
        model = LiteLLMModel("scripted", script=Script(executor=[ScriptTurn(tool="poll")]))
        await model.complete(ModelRequest(role="executor", round=1, messages=[
            {"role": "user", "content": "poll the job"}]))  # fmt: skip
        await asyncio.wait_for(heard.wait(), 30)
        assert handlers.built == 1
    finally:
        litellm.logging_callback_manager.remove_callback_from_all_lists(listener)


def test_a_litellm_whose_function_differs_keeps_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    litellm_passes.uninstall()
    try:
        original = litellm_passes.in_place("thought_signatures")
        replacement = litellm_passes.REPLACEMENTS["thought_signatures"]
        monkeypatch.setitem(
            litellm_passes.REPLACEMENTS,
            "thought_signatures",
            litellm_passes.Replacement(
                replacement.module,
                replacement.attribute,
                replacement.replacement,
                replacement.follows,
                digest="0" * 64,  # as if LiteLLM had changed the function
            ),
        )
        assert litellm_passes.install() == ["thought_signatures"]
        assert litellm_passes.in_place("thought_signatures") is original
        assert litellm_passes.installed() == ["pdf", "success_log", "validate"]
    finally:
        litellm_passes.uninstall()
        monkeypatch.undo()
        assert litellm_passes.install() == []


def test_the_stock_switch_keeps_litellm_as_it_ships(monkeypatch: pytest.MonkeyPatch) -> None:
    litellm_passes.uninstall()
    try:
        monkeypatch.setenv("LOOPDECK_STOCK_LITELLM", "1")
        assert litellm_passes.install() == ALL
        assert litellm_passes.installed() == []
        assert not getattr(litellm_passes.in_place("thought_signatures"), "__loopdeck_pass__", 0)
    finally:
        monkeypatch.delenv("LOOPDECK_STOCK_LITELLM")
        assert litellm_passes.install() == []
