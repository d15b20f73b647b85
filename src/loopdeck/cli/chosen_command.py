"""The parser built for the command being run: only the chosen one gets its arguments, and
the others are listed (for `--help` and for "did you mean") only when the word given is no
command. Building all of them is ~250 `add_argument` calls, about two thirds of the parser's
cost, paid on every start, before a console's first frame; a listing is one more parser each
(~30, each asking gettext for its headings): with them, `run`'s parser took 2.7 ms to build
and parse, 0.7 ms without.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
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
    the chosen command (every command, with `chosen` None) a real parser, and any other one an
    `Unbuilt` for its arguments; `listed` then lists the others by name and help, in order, if
    the chosen word was none of them."""

    def __init__(self, commands: Any, chosen: str | None) -> None:
        self.commands = commands
        self.chosen = chosen
        self.unbuilt: list[tuple[str, str | None]] = []
        self.built = False

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if self.chosen is None or self.chosen == name:
            self.built = True
            return self.commands.add_parser(name, **kwargs)
        self.unbuilt.append((name, kwargs.get("help")))
        return Unbuilt()

    def listed(self) -> None:
        """Once every command was added: a word that is no command gets the whole listing
        ("invalid choice", "did you mean"); a command's own parser needs none of it."""
        if not self.built:
            for name, about in self.unbuilt:
                self.commands.add_parser(name, help=about, add_help=False)


def add_own_module_commands(commands: ChosenCommand, add_run_flags: Callable[..., None]) -> None:
    """The commands of modules of their own, imported only when the word given may be one of
    theirs, or to list every command: `loopdeck run` imports none of them (~3 ms)."""
    from loopdeck.cli.policy_commands import add_policy_command
    from loopdeck.cli.serve import add_serve_command
    from loopdeck.cli.worker_commands import NOT_FOR_SUBMIT, add_worker_commands

    def submit_flags(submit: Any) -> None:
        """`run`'s flags on `submit`: those a submitted run refuses by name (`NOT_FOR_SUBMIT`)
        are still read, to be refused, but its help does not offer them."""
        add_run_flags(submit)
        if isinstance(submit, argparse.ArgumentParser):
            for action in submit._actions:
                if action.dest in NOT_FOR_SUBMIT:
                    action.help = argparse.SUPPRESS

    add_policy_command(commands)
    add_serve_command(commands)
    add_worker_commands(commands, submit_flags)


class Unbuilt:
    """The arguments of a command that is not being run: what is added to it goes nowhere."""

    def __getattr__(self, name: str) -> Any:
        return self._takes_anything

    def _takes_anything(self, *args: Any, **kwargs: Any) -> Unbuilt:
        return self
