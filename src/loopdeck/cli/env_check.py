"""`loopdeck check`: each script of an env, headless and unrecorded, against what it declares
it ends with. Every script is checked against the env's tools before any runs; a FAIL names
its first cause; `-v` prints each run's calls, refused replies and env tracebacks."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from loopdeck import tuning
from loopdeck.core.env_faults import log as env_log
from loopdeck.core.envdir import EnvDir
from loopdeck.core.events import CallProposed, CallStatus, DecisionInvalid, EventBus, ToolFinished
from loopdeck.core.outcome import RunOutcome
from loopdeck.core.scenario import Expect, ScenarioError
from loopdeck.core.text import capped, json_text, plural, visible

# What a tool did itself (raised, a ToolError, timed out): a cause. A call the guard, the
# operator or the idempotency check held back is a consequence the run's detail says.
_FAILED = frozenset({CallStatus.FAILED, CallStatus.OUTCOME_UNKNOWN})
_INDENT = "      "


@dataclass(frozen=True)
class _Fault:
    """Env code that raised (`core/env_faults.py`): what it was, and its traceback."""

    said: str
    traceback: str


class _Heard(logging.Handler):
    """What one run said as it went, in order: its events and the env's faults."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.timeline: list[Any] = []

    def emit(self, record: logging.LogRecord) -> None:
        said, _, trace = record.getMessage().partition("\n")
        self.timeline.append(_Fault(said, trace))

    @property
    def faults(self) -> list[_Fault]:
        return [f for f in self.timeline if isinstance(f, _Fault)]


@contextlib.contextmanager
def _env_faults(heard: _Heard) -> Iterator[None]:
    """Env code that raised, heard while this lasts (its tracebacks are logged at DEBUG)."""
    level, propagate = env_log.level, env_log.propagate
    env_log.setLevel(logging.DEBUG)
    env_log.propagate = False  # said here, not again by a handler of the root logger
    env_log.addHandler(heard)
    try:
        yield
    finally:
        env_log.removeHandler(heard)
        env_log.setLevel(level)
        env_log.propagate = propagate


async def check(args: argparse.Namespace) -> int:
    from loopdeck.operator.kinds import kind_of
    from loopdeck.operator.launch import resolve_env_dir

    tuning.for_headless()  # a headless run's tuning, as `loopdeck run --headless`
    verbose = bool(getattr(args, "verbose", False))
    early = _Heard()
    with _env_faults(early):
        try:
            env_dir = resolve_env_dir(args.env, args.settings)
            print(f"checking {visible(env_dir.name)} ({visible(str(env_dir.path))})")
            kind_of(env_dir.scenario).check_scripts(env_dir)  # refused scripts: before any run
        except ScenarioError:
            if verbose:
                _print_faults(early.faults, "", sys.stderr)
            raise
    nothing = _nothing_to_play(env_dir)
    if nothing is not None:  # a real agent's env: its scripts are not loopdeck's to play
        print(f"nothing to play: {nothing}")
        return 0
    if not env_dir.scenario.scripts:  # no test at all is no pass: said, and exit 1
        print("nothing checked: scenario.toml declares no [scripts.NAME]")
        return 1
    failed = checked = 0
    for name, script in sorted(env_dir.scenario.scripts.items()):
        if script.expect is None:
            print(f"NOTE  {visible(name)}: declares no expect = {{ stop_reason = ... }}; not run")
            continue
        checked += 1
        outcome, heard = await _run(env_dir, name, script.expect, args.settings)
        failed += not _report(name, script.expect, outcome, heard)
        if verbose:
            for line in _calls(heard.timeline):
                print(_INDENT + visible(line))
            _print_faults(heard.faults, _INDENT)
    if not checked:
        print("nothing checked: no script declares an expect = { stop_reason = ... }")
        return 1
    print(f"{failed} failed" if failed else "all expectations met")
    return 1 if failed else 0


def _nothing_to_play(env_dir: EnvDir) -> str | None:
    """Why the env has no script to check, if it has none: a real ACP agent plays none."""
    from loopdeck.operator.kinds import kind_of

    kind = kind_of(env_dir.scenario)
    if not kind.plays_scripts(env_dir):
        agent = visible(kind.agent_name(env_dir, None) or kind.name)
        return (
            f"`{agent}` is a real agent (it plays no script of loopdeck's):"
            f" `loopdeck run {visible(str(env_dir.path))}` drives it"
        )
    return None


async def _run(
    env_dir: EnvDir, name: str, expect: Expect, settings: list[str]
) -> tuple[RunOutcome, _Heard]:
    from loopdeck.operator.launch import RunOptions, prepare_run

    options = RunOptions(
        env=str(env_dir.path),
        script=name,
        model="scripted",
        approve=expect.approve,
        settings=list(settings),
    )
    heard = _Heard()
    bus = EventBus()
    bus.subscribe(heard.timeline.append)
    with _env_faults(heard):
        prepared = prepare_run(options, bus=bus)
        try:
            outcome = await prepared.runtime.run()
        finally:
            prepared.cleanup()
    return outcome, heard


def _report(name: str, expect: Expect, outcome: RunOutcome, heard: _Heard) -> bool:
    """Prints the script's line; True if it ended as it declares."""
    got = outcome.stop_reason
    calls = plural(outcome.tool_calls, "tool call")
    if got is expect.stop_reason:
        print(f"PASS  {visible(name)}: {got.value} ({calls}) — {visible(outcome.detail)}")
        if heard.faults:  # it ended as declared, but env code raised on the way
            more = f" (and {len(heard.faults) - 1} more; -v shows each)" if heard.faults[1:] else ""
            print(f"{_INDENT}but env code raised: {visible(heard.faults[0].said)}{more}")
        return True
    said = f"{got.value}, expected {expect.stop_reason}"
    why = visible(outcome.detail)
    cause = first_cause(heard.timeline)
    if cause is not None:
        why = f"first cause: {visible(cause)} — stopped: {why}"
    print(f"FAIL  {visible(name)}: {said} ({calls}) — {why}")
    return False


def first_cause(timeline: list[Any]) -> str | None:
    """The first thing that went wrong in a run: env code that raised (its exception and its
    line), a tool that failed of itself, or a reply the runtime refused (an unknown tool, the
    message of its arguments' validator)."""
    for item in timeline:
        match item:
            case _Fault(said=said):
                return said
            case ToolFinished(tool=tool, status=status, result=result) if status in _FAILED:
                error = result.get("error") or {}
                return f"{tool} {error.get('code', status.value)}: {error.get('message', '')}"
            case DecisionInvalid(error=error):
                return f"reply refused: {error}"
    return None


def _calls(timeline: list[Any]) -> list[str]:
    """The run's calls and refused replies, in order, one line each."""
    args: dict[str, dict[str, Any]] = {}
    lines = []
    for item in timeline:
        match item:
            case CallProposed(call_id=call_id, args=proposed):
                args[call_id] = proposed
            case ToolFinished(call_id=call_id, tool=tool, status=status, result=result):
                shown = capped(json_text(args.get(call_id, {})), 200)
                error = result.get("error") or {}
                what = f": {error.get('code')}: {error.get('message')}" if error else ""
                lines.append(f"call {tool} {shown} → {status.value}{what}")
            case DecisionInvalid(error=error, corrections_used=used):
                lines.append(f"reply refused (correction {used}): {error}")
    return lines


def _print_faults(faults: list[_Fault], indent: str, file: TextIO | None = None) -> None:
    """Each fault and its traceback (outside text: each line shown, never obeyed)."""
    for fault in faults:
        print(indent + visible(fault.said), file=file)
        for line in fault.traceback.splitlines():
            print(indent + "  " + visible(line), file=file)
