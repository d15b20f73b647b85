"""`loopdeck policy test [FILE…]`, `policy explain RUN CALL` and `policy replay RUN --policy
FILE`: the policy author's tools. `test` runs a file's inline tests (exit 1 naming the first
that fails); `explain` says which rule decided a recorded call and why, every rule's outcome
beside it; `replay` decides a recorded run's asks again under another policy and lists where
it would have decided differently, with the prompts each left to a person.

Light at import (the parser registers the command): the policy engine and the store are
imported when a command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopdeck.store.base import DB_HELP, store_location

if TYPE_CHECKING:
    from loopdeck.policy.record import RunRecord
    from loopdeck.policy.replay import Replayed

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
FACT_WIDTH = 60  # what one attribute's value shows of itself


def add_policy_command(commands: Any) -> None:
    policy = commands.add_parser("policy", help="test a policy, explain or replay its decisions")
    verbs = policy.add_subparsers(dest="policy_command", required=True)
    test = verbs.add_parser("test", help="run a policy file's inline tests (exit 1 on a failure)")
    test.add_argument(
        "files", nargs="*", type=Path, metavar="FILE",
        help="policy files (default: the user's and ./policy.toml)",
    )  # fmt: skip
    test.add_argument("--json", action="store_true", help="one JSON value on the last line")
    explain = verbs.add_parser("explain", help="which rule decided a recorded call, and why")
    replay = verbs.add_parser(
        "replay", help="a recorded run's decisions under another policy: where they differ"
    )
    for verb in (explain, replay):
        verb.add_argument("run_id", metavar="RUN_ID")
        verb.add_argument("--db", type=store_location, help=DB_HELP)
        verb.add_argument("--json", action="store_true", help="one JSON value on the last line")
    explain.add_argument("call_id", metavar="CALL_ID")
    explain.add_argument(
        "--policy", type=Path, metavar="FILE", help="explain it under this policy instead"
    )
    replay.add_argument(
        "--policy", type=Path, metavar="FILE", required=True, help="the policy to replay under"
    )


def run_policy_command(args: argparse.Namespace) -> int:
    if args.policy_command == "test":
        return test_files(args.files, args.json)
    return asyncio.run(_recorded(args))


def test_files(files: list[Path], as_json: bool) -> int:
    """Every named file's tests (default: the user's and ./policy.toml); exit 1 on a failure."""
    from loopdeck.core.text import visible
    from loopdeck.policy.cases import run_cases
    from loopdeck.policy.loading import read_level
    from loopdeck.policy.sources import FILE_NAME, user_policy_path

    if not files:
        found = [user_policy_path(), Path(FILE_NAME)]
        files = [path for path in found if path is not None and path.is_file()]
    if not files:
        print(f"loopdeck: no policy to test: give FILE, or write ./{FILE_NAME}", file=sys.stderr)
        return EXIT_BAD_INPUT
    said: list[dict[str, Any]] = []
    failed, first = 0, ""
    for path in files:
        level = read_level("run", path, tested=False)
        results = run_cases(level)
        failed += sum(not result.passed for result in results)
        first = first or next((f"{path}: {r.words()}" for r in results if not r.passed), "")
        if not as_json:
            counts = f"{_count(len(level.rules), 'rule')}, {_count(len(results), 'test')}"
            print(visible(f"{path}: {counts}, {level.mode}, sha256 {level.sha256[:12]}"))
        for result in results:
            said.append({"file": str(path), "test": result.name, "passed": result.passed,
                         "got": result.got, "rule": result.by})  # fmt: skip
            if not as_json:
                print(visible(f"  {'ok  ' if result.passed else 'FAIL'} {result.words()}"))
    if as_json:
        print(json.dumps(said))
    elif failed:
        failures = f"{failed} policy test{'s' * (failed != 1)} failed"
        print(visible(f"loopdeck: {first}; {failures}"), file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


async def _recorded(args: argparse.Namespace) -> int:
    """`explain` or `replay`: the run's events read through the operator's door."""
    from loopdeck.operator import records
    from loopdeck.operator.replay_link import load_events
    from loopdeck.policy.record import read_run
    from loopdeck.policy.replay import policy_at

    other = policy_at(args.policy) if args.policy is not None else None
    async with records.opened(args.db) as store:
        run_id = (await records.known_run(store, args.run_id))["run_id"]
        record = read_run(run_id, await load_events(store, run_id))
    if args.policy_command == "replay":
        assert other is not None  # required by the parser
        return _replay(record, other, args)
    return _explain(record, args.call_id, other, args)


def _replay(record: RunRecord, other: Any, args: argparse.Namespace) -> int:
    from loopdeck.core.text import visible
    from loopdeck.policy.replay import replay

    done = replay(record, other)
    differ = [one for one in done if one.differs]
    asked = sum(one.ask.effect == "ask" for one in done)
    would_ask = sum(one.effect == "ask" and one.evaluation is not None for one in done)
    sha256 = other.levels[0].sha256  # the file's, as `policy test` and `sha256sum` say it
    if args.json:
        print(json.dumps({"run_id": record.run_id, "policy": str(args.policy),
                          "sha256": sha256, "asks": len(done), "prompts": asked,
                          "prompts_under_policy": would_ask,
                          "decisions": [one.json() for one in done]}))  # fmt: skip
        return EXIT_OK
    print(visible(f"run {record.run_id} replayed under {args.policy} (sha256 {sha256[:12]})"
                  f": {len(done)} asks, {len(differ)} decided differently"))  # fmt: skip
    for one in differ:
        print(visible(f"  {_call(one)}: {one.ask.words()} → would be {one.words()}"))
    print(f"asks left to the operator: {asked} in the run, {would_ask} under this policy")
    return EXIT_OK


def _explain(record: RunRecord, call_id: str, other: Any, args: argparse.Namespace) -> int:
    from loopdeck.core.text import visible
    from loopdeck.policy.replay import explain

    done = explain(record, call_id, other)
    if not done:
        said = (
            f"run {record.run_id}: no call {call_id} was asked about (only asked calls are decided)"
        )
        print(f"loopdeck: {visible(said)}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps([_explained_json(one) for one in done]))
        return EXIT_OK
    if other is None and record.in_force is not None:
        levels = ", ".join(f"{lv['level']} {lv['path']} ({lv['mode']}, sha256 {lv['sha256'][:12]})"
                           for lv in record.in_force.levels)  # fmt: skip
        print(visible(f"policy in force: {levels}"))
    elif other is None:
        print("no policy was in force in this run: who decided is all there is to say")
    for number, one in enumerate(done, 1):
        for line in _explained_lines(number, one, other is not None):
            print(visible(line))
    return EXIT_OK


def _call(one: Replayed) -> str:
    from loopdeck.core.text import short_args

    call = one.ask.facts["call"]
    return f"{one.ask.call_id} {call['title']}({short_args(call['args'], 40)})"


def _explained_lines(number: int, one: Replayed, other: bool) -> list[str]:
    ask = one.ask
    again = f", asked again: {ask.request.asked_again}" if ask.request.asked_again else ""
    lines = [f"{_call(one)} · ask {number}{again}", f"  decided: {ask.words()}"]
    if other:
        lines.append(f"  under this policy: {one.words()}")
    if one.evaluation is None:
        return lines
    decider = one.evaluation.rule
    for outcome in one.evaluation.outcomes:
        rule = outcome.rule
        said = "could not be evaluated: " + outcome.error if outcome.error else (
            "holds" if outcome.effect != "none" else "does not hold")  # fmt: skip
        mark = "→" if rule is decider else " "
        shadow = " (shadow)" if rule.shadow else ""
        first, *more = _when_lines(rule.when)
        lines.append(f"  {mark} {rule.key} [{rule.effect}{shadow}] {said}: {first}")
        lines.extend(f"      {line}" for line in more)
        if rule is decider and rule.message:
            lines.append(f"      message: {rule.message}")
    lines.append("  attributes: " + _facts(one.evaluation.facts))
    return lines


def _when_lines(when: str) -> list[str]:
    """A condition written over several lines, each under its rule's line, none blank; its
    own indentation past the first line's kept relative to the least indented."""
    lines = [line.rstrip() for line in when.strip().splitlines() if line.strip()] or [""]
    rest = lines[1:]
    least = min((len(line) - len(line.lstrip()) for line in rest), default=0)
    return [lines[0], *(line[least:] for line in rest)]


def _facts(facts: dict[str, Any]) -> str:
    """The attributes the rules read, flat (`call.tool=write_file · state.unchanged=true`)."""
    flat: list[str] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value and prefix.count(".") < 2:
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
            return
        shown = json.dumps(value, ensure_ascii=False, default=str)
        flat.append(f"{prefix}={shown if len(shown) <= FACT_WIDTH else shown[:59] + '…'}")

    walk("", {k: v for k, v in facts.items() if k != "rules"})
    for key, own in facts.get("rules", {}).items():
        flat.append(f"rule[{key}].uses={own['uses']} age_s={own['age_s']}")
    return " · ".join(flat)


def _explained_json(one: Replayed) -> dict[str, Any]:
    said = one.json()
    if one.evaluation is not None:
        said["rules"] = [
            {"rule": o.rule.key, "effect": o.rule.effect, "says": o.effect, "error": o.error,
             "when": o.rule.when, "decides": o.rule is one.evaluation.rule}
            for o in one.evaluation.outcomes
        ]  # fmt: skip
        said["facts"] = one.evaluation.facts
    return said
