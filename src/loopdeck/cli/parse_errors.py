"""How the command line says what is wrong with its words: a mistyped choice with the nearest
one ("did you mean approve?"), and a word a command does not take under that command's own
usage, not the top parser's, with the flag meant when one is close ("did you mean --headless?").
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from typing import Any, NoReturn

INVALID_CHOICE = re.compile(
    r"invalid choice: (['\"]?)(?P<value>.*?)\1 \(choose from (?P<choices>.*)\)"
)


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose "invalid choice" (a mistyped command, a flag's value) names
    the nearest choice: `loopdeck aprove` → "did you mean approve?"."""

    def error(self, message: str) -> NoReturn:
        super().error(message + nearest_choice(message))


class CommandParser(Parser):
    """A command's parser (`loopdeck runs`, `loopdeck policy test`): a word it does not take
    is refused with its own usage line. argparse hands a command's leftovers back to the top
    parser, whose usage (`loopdeck [-h] {runs} ...`) says nothing of the command."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self.nearest_flag(extras)}")
        return parsed, extras

    def nearest_flag(self, extras: Sequence[str]) -> str:
        """ "; did you mean --headless?" for the first unknown flag close to one this command
        takes (`--hedless`), "" otherwise."""
        names = [flag[2:] for flag in self._option_string_actions if flag.startswith("--")]
        for extra in extras:
            word = extra.split("=", 1)[0]
            if not word.startswith("-"):
                continue
            # Without the dashes every flag shares: "--reasn" is not "--grant".
            close = difflib.get_close_matches(word.lstrip("-"), names, n=1, cutoff=0.7)
            if close:
                return f"; did you mean --{close[0]}?"
        return ""


def nearest_choice(message: str) -> str:
    """ "; did you mean NAME?" for an invalid-choice message with a choice close to the value
    given, "" otherwise."""
    found = INVALID_CHOICE.search(message)
    if found is None:
        return ""
    choices = [c.strip().strip("'\"") for c in found["choices"].split(",")]
    close = difflib.get_close_matches(found["value"], choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""
