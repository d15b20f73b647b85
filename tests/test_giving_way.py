"""With a console open, LiteLLM's pool gives the interpreter's lock way to the console's loop
before each pass over a long conversation (`loopdeck.tuning.lock_switching.give_way`). Headless
nothing gives way, the console's own thread never does, and a call returns the same."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from loopdeck.core.model import ModelRequest
from loopdeck.core.scenario import Script, ScriptedPrice, ScriptTurn
from loopdeck.llm.client import LiteLLMModel
from loopdeck.llm.loader import litellm_module
from loopdeck.tuning import lock_switching


@pytest.fixture
def terms() -> Iterator[None]:
    """Starts headless; gives back whatever terms the process had (a console test before)."""
    interval, console = sys.getswitchinterval(), lock_switching.console_thread()
    lock_switching.headless()
    yield
    lock_switching.headless()
    if console is not None:
        lock_switching.for_console()  # consoles in this process ran on this thread
    sys.setswitchinterval(interval)


def off_the_loop(conversation: list[Any]) -> bool:
    gave_way: list[bool] = []
    worker = threading.Thread(target=lambda: gave_way.append(lock_switching.give_way(conversation)))
    worker.start()
    worker.join()
    return gave_way[0]


def test_only_other_threads_give_way_and_only_to_a_console(terms: None) -> None:
    long = [{"role": "user", "content": "x"}] * lock_switching.GIVE_WAY_FROM
    assert not off_the_loop(long)  # headless: nobody waits for the lock
    lock_switching.for_console()
    assert sys.getswitchinterval() == lock_switching.CONSOLE_SWITCH_INTERVAL_S
    assert not lock_switching.give_way(long)  # the console's loop never naps
    assert off_the_loop(long)
    assert not off_the_loop(long[1:])  # a short pass costs less than giving way
    lock_switching.headless()
    assert not off_the_loop(long)
    assert sys.getswitchinterval() == 0.005


def history(length: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "poll the job"}]
    while len(messages) < length:
        i = len(messages)
        call = {"id": f"c{i}", "type": "function", "function": {"name": "poll", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": json.dumps({"i": i})},
        ]
    return messages


async def test_litellms_pool_gives_way_on_a_long_conversation_and_replies_the_same(
    terms: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    litellm_module()
    gave_way: list[int] = []  # the threads that did
    sleep = time.sleep

    def nap(seconds: float) -> None:
        if seconds == lock_switching.GIVE_WAY_S:
            gave_way.append(threading.get_ident())
        sleep(seconds)

    monkeypatch.setattr(time, "sleep", nap)
    price = ScriptedPrice(input_per_million=3.0, output_per_million=15.0)
    model = LiteLLMModel("scripted", script=Script(executor=[ScriptTurn(tool="poll")]), price=price)
    request = ModelRequest(role="executor", round=1, messages=history(1_200))

    headless = await model.complete(request)
    assert gave_way == []

    lock_switching.for_console()
    shown = await model.complete(request)
    # In the pool, where LiteLLM runs a synchronous provider's `completion`: its message
    # validation and the offline model's token count. Its walk cutting thought signatures off
    # runs in `acompletion`, on the loop, and the loop never naps.
    assert len(gave_way) == 2
    assert threading.get_ident() not in gave_way
    assert shown.tool_calls == headless.tool_calls
    assert (shown.prompt_tokens, shown.completion_tokens) == (
        headless.prompt_tokens,
        headless.completion_tokens,
    )
    assert shown.cost_usd == headless.cost_usd and shown.cost_usd is not None

    gave_way.clear()
    await model.complete(ModelRequest(role="executor", round=1, messages=history(50)))
    assert gave_way == []
