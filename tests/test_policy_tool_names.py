"""A rule that names a tool its run does not have never fires as written (a misspelt tool
in a deny rule denies nothing): the run's own policy is refused at its start, naming the rule
and the closest tool; the user's, shared by every env, is warned of and the run goes on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopdeck.policy.tool_names import tools_named

POLICY_ENV = str(Path(__file__).parent / "envs" / "policy")
MISSPELT = """[[rule]]
id = "no-etc"
effect = "deny"
when = 'call.tool == "write_fle" && call.args.path.startsWith("/etc")'
"""
Cli = Callable[..., tuple[int, Any, str]]


@pytest.mark.parametrize(
    ("condition", "named"),
    [
        ('call.tool == "a" && state.unchanged', ("a",)),
        ('"b" != call.tool', ("b",)),
        ('call.tool in ["c", "d"] || rule.uses > 1', ("c", "d")),
        ('call.tool.startsWith("e")', ()),  # a prefix names no tool
        ('call.args.tool == "f"', ()),  # an argument, not the call's tool
        ("call.tool == call.title", ()),
    ],
)
def test_the_tools_a_condition_names(condition: str, named: tuple[str, ...]) -> None:
    assert sorted(tools_named(condition)) == sorted(named)


def test_a_run_policy_naming_a_tool_the_run_lacks_is_refused_with_the_closest(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(MISSPELT, encoding="utf-8")
    db = str(tmp_path / "s.db")
    code, _, err = cli("run", POLICY_ENV, "--script", "writes", "--policy", str(path),
                       "--approve", "auto", "--headless", "--db", db)  # fmt: skip
    assert code == 2, err
    assert f"{path}: rule 1 (no-etc): names tool 'write_fle', which this run does not have" in err
    assert "(did you mean 'write_file'?)" in err
    assert "started" not in err


def test_the_users_policy_naming_a_tool_the_run_lacks_is_warned_of(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "user.toml"
    path.write_text(MISSPELT, encoding="utf-8")
    monkeypatch.setenv("LOOPDECK_USER_POLICY", str(path))
    code, done, err = cli("run", POLICY_ENV, "--script", "writes", "--approve", "auto",
                          "--headless", "--json", "--db", str(tmp_path / "s.db"))  # fmt: skip
    assert code in (0, 1) and done is not None, err  # it ran
    assert f"{path}: rule 1 (no-etc): names tool 'write_fle'" in err
    assert "it never fires in this run (the user's policy)" in err


def test_the_users_policy_naming_a_tool_the_run_lacks_is_warned_of_at_submit(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A submitted run is prepared at submit (and again by its worker, which says the same
    on its output): the warning was dropped on both paths."""
    path = tmp_path / "user.toml"
    path.write_text(MISSPELT, encoding="utf-8")
    monkeypatch.setenv("LOOPDECK_USER_POLICY", str(path))
    code, _, err = cli("submit", POLICY_ENV, "--script", "writes", "--approve", "auto",
                       "--db", str(tmp_path / "s.db"))  # fmt: skip
    assert code == 0, err
    assert f"{path}: rule 1 (no-etc): names tool 'write_fle'" in err
    assert "it never fires in this run (the user's policy)" in err


@pytest.mark.slow
def test_an_acp_runs_policy_may_name_its_terminal_tool(cli: Cli, tmp_path: Path) -> None:
    """An ACP run's tools are its agent's kinds and loopdeck's own writes for it: the file it
    writes (`fs_write_text_file`) and the command it runs (`terminal`, a tool the run learnt
    only once it ran, so a rule naming it was refused as naming a tool the run lacks); a
    Claude Code tool name (`Edit`) is still refused, the kind suggested."""
    terminal = tmp_path / "terminal.toml"
    terminal.write_text(
        '[[rule]]\nid = "no-rm"\neffect = "deny"\n'
        'when = \'call.tool == "terminal" && call.args.command == "rm"\'\n',
        encoding="utf-8",
    )
    db = str(tmp_path / "s.db")
    code, done, err = cli("run", "calc_acp", "--script", "solve", "--policy", str(terminal),
                          "--approve", "auto", "--headless", "--json", "--db", db)  # fmt: skip
    assert code == 0 and done is not None and done["stop_reason"] == "goal_met", err
    named = tmp_path / "named.toml"
    named.write_text('[[rule]]\nid = "no-edit"\neffect = "deny"\nwhen = \'call.tool == "Edit"\'\n')
    code, _, err = cli("run", "calc_acp", "--script", "solve", "--policy", str(named),
                       "--approve", "auto", "--headless", "--db", db)  # fmt: skip
    assert code == 2, err
    assert "names tool 'Edit', which this run does not have (did you mean 'edit'?)" in err
