"""The parser built for one command (`cli/chosen_command.py`) parses and helps with that
command exactly as the parser of every command does."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from loopdeck.cli.chosen_command import command_word
from loopdeck.cli.parser import build_parser


def _said(command: str | None, argv: list[str]) -> tuple[int | str | None, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            build_parser(command).parse_args(argv)
        except SystemExit as exit:
            return exit.code, out.getvalue()
    return None, out.getvalue()


def _commands() -> list[str]:
    _, top = _said(None, ["--help"])
    listed = re.search(r"\{([^}]*)\}", top)
    assert listed is not None, top
    return listed[1].split(",")


def test_every_command_is_listed_whichever_is_built() -> None:
    names = _commands()
    assert {"run", "runs", "approve", "policy", "worker", "gateway", "serve"} <= set(names)
    for name in names:
        assert _said(name, [name, "--help"])[1].startswith(f"usage: loopdeck {name}")


@pytest.mark.parametrize("name", _commands())
def test_a_command_built_alone_helps_as_the_whole_parser_does(name: str) -> None:
    assert _said(name, [name, "--help"]) == _said(None, [name, "--help"])


def test_a_command_built_alone_parses_as_the_whole_parser_does() -> None:
    for argv in (
        ["run", "order_support", "--script", "ask", "--max-turns", "4", "--headless"],
        ["approve", "abc123", "c4", "--db", "x.db"],
        ["policy", "test", "p.toml"],
        ["runs", "--json"],
    ):
        alone = build_parser(command_word(argv)).parse_args(argv)
        assert alone == build_parser().parse_args(argv)


def test_a_mistyped_command_is_named_with_the_nearest_one() -> None:
    code, said = _said(command_word(["aprove", "x"]), ["aprove", "x"])
    assert code == 2 and "did you mean approve?" in said


def test_the_command_word_is_the_first_that_is_not_an_option() -> None:
    assert command_word(["-h"]) is None
    assert command_word(["runs", "--json"]) == "runs"
    assert command_word(["--", "runs"]) is None
