"""The parser built for the command being run: every command is listed (for `--help` and for
"did you mean"), but only the chosen one gets its arguments. Building all of them is ~250
`add_argument` calls, about two thirds of the parser's cost, paid on every start, before a
console's first frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def command_word(argv: Sequence[str]) -> str | None:
    """The command `argv` names (its first word that is not an option), or None."""
    for word in argv:
        if not word.startswith("-"):
            return word
        if word == "--":
            return None
    return None


class ChosenCommand:
    """`add_subparsers()`'s action, as the `add_*_command` functions use it: `add_parser` gives
    the chosen command (every command, with `chosen` None) a real parser, and any other one a
    listing of its name and help and an `Unbuilt` for its arguments."""

    def __init__(self, commands: Any, chosen: str | None) -> None:
        self.commands = commands
        self.chosen = chosen

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if self.chosen is None or self.chosen == name:
            return self.commands.add_parser(name, **kwargs)
        self.commands.add_parser(name, help=kwargs.get("help"), add_help=False)
        return Unbuilt()


class Unbuilt:
    """The arguments of a command that is not being run: what is added to it goes nowhere."""

    def __getattr__(self, name: str) -> Any:
        return self._takes_anything

    def _takes_anything(self, *args: Any, **kwargs: Any) -> Unbuilt:
        return self
