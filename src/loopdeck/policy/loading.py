"""A run's policy read whole from its files (`policy/sources.py`), each a level of the policy
in force (`engine.Policy`): its rules' conditions read, its inline tests run; a file that
fails either refuses the run before it starts, naming the file and the rule or test.

A policy a run recorded (its text, `PolicyInForce.levels`) is not refused by a check added
since it was recorded (`recorded_level`): a run rebuilt from its log, or a fork rebuilt from
its source's, decides as the run did up to where it goes live; a rule such a check refuses
then fails at every ask, closed (`expressions.Condition`), as it does in a queued run.
`refused_today` says what a file of that text would be refused for now.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from loopdeck.policy.cases import run_cases
from loopdeck.policy.document import PolicyDocument, PolicyError, parse_document, read_document
from loopdeck.policy.engine import Level, Policy, Rule
from loopdeck.policy.expressions import Condition, ExpressionError
from loopdeck.policy.gate import RunPolicy
from loopdeck.policy.sources import policy_files


def load_policy(env_folder: Path | None, explicit: Path | None) -> Policy | None:
    """The policy in force for a run, or None when no level has a file."""
    return levels_of(policy_files(env_folder, explicit))


def levels_of(files: list[tuple[str, Path]]) -> Policy | None:
    return Policy([read_level(name, path) for name, path in files]) if files else None


def run_policy(files: list[tuple[str, Path]], run_kind: str) -> RunPolicy | None:
    """The policy of one run about to start, as its runtime asks it."""
    policy = levels_of(files)
    return None if policy is None else RunPolicy(policy, run_kind)


def recorded_run_policy(levels: list[dict[str, str]], run_kind: str) -> RunPolicy:
    """The policy a run recorded (`PolicyInForce.levels`, or its submitted options'), read
    again from its text: a run is decided under the policy it was given, whatever its files
    say now, and as the load it was recorded under read it (`recorded_level`)."""
    try:
        return RunPolicy(Policy([recorded_level(level) for level in levels]), run_kind)
    except KeyError as exc:
        said = f"the run's recorded policy has no {exc} (recorded: {levels!r:.200})"
        raise PolicyError(said) from None


def refused_today(levels: list[dict[str, str]]) -> list[str]:
    """Why each level of a recorded policy would be refused if read from a file today (a
    check added since it was recorded), in the words a file's refusal has; [] when none."""
    refused = []
    for level in levels:
        path, text = Path(level.get("path", "?")), level.get("text", "")
        try:
            level_of(level.get("level", "run"), path, parse_document(path, text), text,
                     tested=False)  # fmt: skip
        except PolicyError as exc:
            refused.append(str(exc))
    return refused


def read_level(name: str, path: Path, *, tested: bool = True) -> Level:
    """One file as a level: its rules' conditions read (`PolicyError` naming the rule), and,
    when `tested`, its inline tests passed (`PolicyError` naming the first that fails)."""
    document, text = read_document(path)
    return level_of(name, path, document, text, tested=tested)


def recorded_level(recorded: dict[str, str]) -> Level:
    """A level as a run recorded it (`PolicyInForce.levels`), read again from its text: its
    rules' conditions parsed and checked, a condition a check added since refuses kept, not
    refused (evaluated as the run did only while a rebuild follows the run's log; else it
    fails, and a failing rule never allows), its tests neither read nor run."""
    path, text = Path(recorded["path"]), recorded["text"]
    document = parse_document(path, text, tests=False)
    return level_of(recorded["level"], path, document, text, tested=False, as_recorded=True)


def level_of(
    name: str, path: Path, document: PolicyDocument, text: str, *, tested: bool = True,
    as_recorded: bool = False,
) -> Level:  # fmt: skip
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()  # `sha256sum policy.toml`'s
    shadow = document.mode == "shadow"
    rules = []
    for index, written in enumerate(document.rule, 1):
        try:
            condition = Condition(written.when, as_recorded=as_recorded)
        except ExpressionError as exc:
            raise PolicyError(f"{path}: rule {index} ({written.id}): when: {exc}") from None
        rules.append(Rule(written.id, written.effect, condition, written.message, name, sha,
                          shadow, written.when))  # fmt: skip
    level = Level(name, path, sha, document.mode, text, tuple(document.untrusted),
                  tuple(rules), tuple(document.test))  # fmt: skip
    if tested:
        failed = next((result for result in run_cases(level) if not result.passed), None)
        if failed is not None:
            raise PolicyError(
                f"{path}: {failed.words()}; the policy is not used until its tests pass"
                f" (`loopdeck policy test {path}`)"
            )
    return level
