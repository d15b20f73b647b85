"""Every flag of the commands a new operator meets first says what it does in `--help`
(`attach --theme`, `envs --json` and `export --format` said nothing)."""

from __future__ import annotations

import argparse

import pytest

from loopdeck.cli.parser import build_parser

FIRST_MET = (
    "run", "console", "runs", "pending", "approve", "reject", "answer", "message", "cancel",
    "pause", "resume", "export", "attach", "replay", "verify", "grants", "revoke", "resolve",
    "envs", "init-env", "check",
)  # fmt: skip


@pytest.mark.parametrize("name", FIRST_MET)
def test_every_flag_says_what_it_does(name: str) -> None:
    parser = build_parser(name)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = commands.choices[name]
    silent = [
        action.option_strings[-1]
        for action in command._actions
        if action.option_strings and not action.help
    ]
    assert not silent, f"loopdeck {name}: {silent} say nothing in --help"


def _flags_without_help(parser: argparse.ArgumentParser, path: str) -> list[str]:
    found: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _flags_without_help(sub, f"{path} {name}")
        elif action.option_strings and not action.help:
            found.append(f"{path} {action.option_strings[-1]}")
    return found


def test_every_flag_of_every_command_says_what_it_does() -> None:
    """`submit --mode` and `submit --model-timeout` said nothing."""
    assert _flags_without_help(build_parser(), "loopdeck") == []


def test_pending_says_it_lists_questions_and_outcomes_too() -> None:
    parser = build_parser("pending")
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helped = {action.dest: action.help for action in commands._choices_actions}
    assert "questions" in (helped["pending"] or ""), helped
