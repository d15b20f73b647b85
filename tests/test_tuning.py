"""Interpreter tuning is applied only by loopdeck's entry points (`loopdeck.tuning`): an
embedder's interpreter is left as it was, the console's is tuned, `LOOPDECK_TUNING=off` tunes
nothing, and each tuning refuses, saying why, where it was not measured or written for."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from conftest import SAMPLES
from textual.cache import LRUCache
from textual.strip import Strip

from loopdeck import tuning
from loopdeck.tuning import (
    collector,
    guards,
    lock_switching,
    loop_idle,
    strip_caches,
    textual_cycles,
)

# The interpreter's state as a probe prints it: thresholds, freeze count, switch interval,
# whether Textual's strips are patched.
STATE = (
    "import gc, json, sys\n"
    "def state():\n"
    "    strip = sys.modules.get('textual.strip')\n"
    "    patched = bool(strip and hasattr(strip.Strip.divide, '__wrapped__'))\n"
    "    return [list(gc.get_threshold()), gc.get_freeze_count(), sys.getswitchinterval(),"
    " patched, gc.isenabled()]\n"
)

EMBEDDER = STATE + (
    "before = state()\n"
    "import asyncio\n"
    "from pathlib import Path\n"
    "from loopdeck.core import AutoApprover, RunConfig, Runtime\n"
    "from loopdeck.core.envdir import load_env_dir\n"
    "from loopdeck.llm.client import LiteLLMModel\n"
    "env_dir = load_env_dir(Path(sys.argv[1]))\n"
    "scenario = env_dir.scenario\n"
    "model = LiteLLMModel('scripted', script=env_dir.script('solve'),"
    " price=scenario.scripted_price)\n"
    "config = RunConfig(env=scenario.name, script='solve', model='scripted',"
    " goal=scenario.goal, budget=scenario.budgets)\n"
    "runtime = Runtime(config, env_dir.create(env_dir.prepare_workdir()), model, AutoApprover())\n"
    "outcome = asyncio.run(runtime.run())\n"
    "print(json.dumps({'before': before, 'after': state(),"
    " 'stop': outcome.stop_reason.value, 'calls': len(outcome.calls)}))\n"
)

OFF = "LOOPDECK_TUNING=off: no tuning applied, the interpreter is left as Python set it"
CONSOLE = STATE + (
    "before = state()\n"
    "from loopdeck import tuning\n"
    "refused = tuning.for_console()\n"
    "from loopdeck.tuning import collector\n"
    "collector.imported()  # as `llm.loader` says once LiteLLM is imported\n"
    "print(json.dumps({'before': before, 'after': state(), 'refused': refused}))\n"
)


def probe(code: str, *args: str, tuning_switch: str | None = None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != tuning.SWITCH}
    if tuning_switch is not None:
        env[tuning.SWITCH] = tuning_switch
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, env=env
    ).stdout
    found: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return found


@pytest.mark.slow  # a fresh interpreter importing LiteLLM, seconds: `make stress` runs it (CI too)
def test_an_embedders_run_with_litellm_leaves_the_interpreter_as_it_was() -> None:
    found = probe(EMBEDDER, str(SAMPLES / "order_support"))
    assert found["stop"] == "goal_met"
    assert found["calls"]  # the model was called: LiteLLM was imported and used
    assert found["before"] == [[700, 10, 10], 0, 0.005, False, True]
    assert found["after"] == found["before"]


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the collector is tuned on 3.11")
def test_the_console_tunes_the_interpreter_and_off_tunes_nothing() -> None:
    tuned = probe(CONSOLE)
    assert tuned["refused"] == []
    thresholds, frozen, interval, patched, enabled = tuned["after"]  # type: ignore[misc]
    assert thresholds == list(collector.CONSOLE_THRESHOLDS)
    assert frozen > 10_000  # what was imported by then, out of every collection's walk
    assert interval == lock_switching.CONSOLE_SWITCH_INTERVAL_S
    assert patched and enabled

    untouched = probe(CONSOLE, tuning_switch="off")
    assert untouched["after"] == untouched["before"] == [[700, 10, 10], 0, 0.005, False, True]
    assert untouched["refused"] == [OFF]


def test_off_holds_the_collector_nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tuning.SWITCH, "off")
    monkeypatch.setattr(collector, "_holding", True)  # given back after the test
    assert tuning.for_console() == [OFF]
    with collector.held():
        assert gc.isenabled()  # a link's long read, LiteLLM's import: nothing held


def test_a_textual_patch_refuses_another_textual_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guards, "textual_version", lambda: "9.0.1")
    assert textual_cycles.refusal() == "written for Textual >=8.2,<9.0, this is Textual 9.0.1"
    assert strip_caches.refusal() == "written for Textual >=8.2,<9.0, this is Textual 9.0.1"


def test_textual_version_is_the_one_its_distribution_says() -> None:
    """Read from the dist-info beside the package (no importlib.metadata on the way to the
    first frame): the same version importlib.metadata reads."""
    assert guards.textual_version() == metadata.version("textual")


def test_a_textual_patch_refuses_a_replaced_function_it_was_not_written_against(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Same version, other code (a patch release, a vendored fork): each patch compares the
    source of what it replaces, and refuses rather than wrap what it has not read."""
    assert textual_cycles.refusal() is None

    def clear(self: LRUCache[object, object]) -> None:  # not Textual's
        pass

    monkeypatch.setattr(LRUCache, "clear", clear)
    assert textual_cycles.refusal() == (
        f"LRUCache.clear is not the code this was written against "
        f"(Textual {metadata.version('textual')})"
    )
    refused = [line for line in _console_refusals() if line.startswith("Textual strips")]
    assert refused == [f"Textual strips without cycles: refused, {textual_cycles.refusal()}"]


def test_a_strip_that_is_no_longer_slotted_keeps_textuals_caches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Strip, "_crop_cache", None)
    assert strip_caches.refusal() == (
        "Strip._crop_cache is not a slot of Strip (Textual's strips differ)"
    )


@pytest.mark.parametrize("version", [(3, 12, 1, "final", 0), (3, 13, 0, "final", 0)])
def test_the_collector_and_switch_tunings_refuse_a_python_they_were_not_measured_on(
    monkeypatch: pytest.MonkeyPatch, version: tuple[object, ...]
) -> None:
    monkeypatch.setattr(sys, "version_info", version)
    shown = ".".join(map(str, version[:3]))
    reason = f"measured on Python 3.11 only, this is Python {shown}: left as Python sets it"
    assert guards.python_refusal() == reason
    refused = {t.name: t.refusal() for t in (*tuning.CONSOLE, *tuning.HEADLESS)}
    assert refused == {
        "collector thresholds": reason,
        "collector held during model calls": reason,
        "LiteLLM's modules frozen out of collections": reason,
        "switch interval": reason,
        "Textual strips without cycles": None,  # Textual's code, not the interpreter's
        "Textual strip caches made on first use": None,
        "collector thresholds after LiteLLM's import": reason,
    }


def _console_refusals() -> list[str]:
    """What `for_console` would refuse here, without applying anything."""
    return [f"{t.name}: refused, {r}" for t in tuning.CONSOLE if (r := t.refusal()) is not None]


def test_loading_the_tuning_package_imports_no_textual() -> None:
    """`operator` and `llm` hold the collector: that must not bring Textual with it."""
    code = "import sys, loopdeck.tuning, loopdeck.tuning.collector; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


async def test_a_loop_whose_queues_are_not_asyncios_is_never_blocked_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only `tuning.loop_idle` reads asyncio's private queues (core reads none), and only
    where they have asyncio's shape; another loop implementation is never waited on."""
    loop = asyncio.get_running_loop()
    assert loop_idle.refusal(loop) is None
    assert loop_idle.nothing_else_due(loop, 30.0)  # nothing ready here, no timer due

    class OtherLoop(asyncio.AbstractEventLoop):
        """Another implementation: no `_ready` deque, no `_scheduled` heap."""

    other = OtherLoop()
    caplog.set_level(logging.INFO, logger="loopdeck.tuning.loop_idle")
    assert not loop_idle.nothing_else_due(other, 30.0)
    assert not loop_idle.nothing_else_due(other, 30.0)
    said = [r.getMessage() for r in caplog.records if r.name == "loopdeck.tuning.loop_idle"]
    assert said == [
        "env code is never waited for on this loop: "
        f"{OtherLoop.__qualname__} keeps no ready deque and timer heap as asyncio's do"
    ]
    core = Path(__file__).parent.parent / "src" / "loopdeck" / "core"
    readers = [p.name for p in core.glob("*.py") if "._ready" in p.read_text()]
    assert readers == []
