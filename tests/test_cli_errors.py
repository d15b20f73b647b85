"""Bad input exits 2 with a message naming the problem."""

import os
import subprocess
import sys

import pytest
from conftest import SAMPLES


def test_unknown_env_lists_the_samples(cli, tmp_path) -> None:
    code, _, err = cli("run", "no_such_env", "--headless", "--db", str(tmp_path / "s.db"))
    assert code == 2
    assert "no_such_env" in err and "service_outage" in err
    assert not (tmp_path / "s.db").exists()  # no store made for a run that cannot be


def test_unknown_script_lists_the_scripts(cli) -> None:
    code, _, err = cli("run", "service_outage", "--script", "nope", "--headless")
    assert code == 2
    assert "'nope'" in err and "wrong-guess" in err


def test_broken_scenario_names_the_file(cli, tmp_path) -> None:
    env = tmp_path / "broken"
    env.mkdir()
    (env / "scenario.toml").write_text('name = "x"\ngoal = \n')
    (env / "env.py").write_text("")
    code, _, err = cli("run", str(env), "--headless")
    assert code == 2
    assert "scenario.toml" in err and "not valid TOML" in err


def test_invalid_scenario_field_is_named(cli, tmp_path) -> None:
    env = tmp_path / "bad_budget"
    env.mkdir()
    (env / "scenario.toml").write_text('name = "x"\ngoal = "g"\n[budgets]\nmax_turns = -3\n')
    (env / "env.py").write_text("")
    code, _, err = cli("run", str(env), "--headless")
    assert code == 2
    assert "budgets.max_turns" in err


def test_env_without_make_env_is_named(cli, tmp_path) -> None:
    env = tmp_path / "no_factory"
    env.mkdir()
    (env / "scenario.toml").write_text((SAMPLES / "service_outage" / "scenario.toml").read_text())
    (env / "env.py").write_text("X = 1\n")
    code, _, err = cli("run", str(env), "--headless")
    assert code == 2
    assert "make_env" in err
    (env / "env.py").write_text("def make_env(workdir, data):\n    return {'not': 'an env'}\n")
    code, _, err = cli("run", str(env), "--headless")
    assert code == 2 and "make_env() must return an Environment, not dict" in err, err


def test_script_turn_with_two_actions_is_rejected(cli, tmp_path) -> None:
    env = tmp_path / "two_actions"
    env.mkdir()
    (env / "scenario.toml").write_text(
        'name = "x"\ngoal = "g"\n[[scripts.s.executor]]\ntool = "a"\nfinal = "b"\n'
    )
    (env / "env.py").write_text("")
    code, _, err = cli("run", str(env), "--headless")
    assert code == 2
    assert "scripts.s.executor turn 1: " in err and "exactly one" in err  # counted from 1


def test_a_misspelt_scenario_key_is_said_unknown(cli, tmp_path) -> None:
    env = tmp_path / "typo"
    env.mkdir()
    (env / "scenario.toml").write_text('name = "x"\ngoall = "g"\n')
    (env / "env.py").write_text("")
    code, _, err = cli("run", str(env), "--headless")
    assert code == 2
    assert "  goall: unknown key" in err and "  goal: Field required" in err


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--max-turns", "0"), ("--max-tokens", "many"), ("--max-cost", "-1"), ("--deadline", "x")],
)
def test_bad_flag_values_name_the_flag(cli, capsys, flag, value) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli("run", "service_outage", "--headless", flag, value)
    assert exit_info.value.code == 2
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--max-turns", "-1", "must be a whole number greater than 0, got '-1'"),
        ("--max-turns", "1.5", "must be a whole number, got '1.5'"),
        ("--max-cost", "0", "must be a number greater than 0, got '0'"),
        ("--max-cost", "inf", "must be a finite number, got 'inf'"),
    ],
)
def test_a_bad_cap_is_said_once_and_plainly(cli, capsys, flag, value, said) -> None:
    """It read "must be a finite positive integer greater than 0": finite of a whole number,
    and positive beside greater than 0."""
    with pytest.raises(SystemExit) as exit_info:
        cli("run", "service_outage", "--headless", f"{flag}={value}")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith(f"argument {flag}: {said}")


def test_unknown_flag_exits_2(cli, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli("run", "service_outage", "--frobnicate")
    assert exit_info.value.code == 2
    assert "--frobnicate" in capsys.readouterr().err


def test_real_model_headless_needs_an_approve_choice(cli) -> None:
    code, _, err = cli("run", "service_outage", "--model", "openai/gpt-x", "--headless")
    assert code == 2
    assert "--approve" in err


def _loopdeck(*args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run(
        [sys.executable, "-m", "loopdeck", *args],
        capture_output=True, text=True, timeout=60, check=False, env=environ,
    )  # fmt: skip


def test_the_help_says_console_opens_the_fleet() -> None:
    said = _loopdeck("--help")
    assert said.returncode == 0
    [line] = [line for line in said.stdout.splitlines() if line.strip().startswith("console ")]
    assert "fleet" in line and "launcher" not in line and "sample envs" not in line


def test_a_real_model_headless_without_approve_names_every_choice(tmp_path) -> None:
    said = _loopdeck(
        "run", "order_support", "--model", "openai/gpt-4o-mini", "--headless",
        "--db", str(tmp_path / "s.db"),
    )  # fmt: skip
    assert said.returncode == 2
    assert "choose auto, deny or wait" in said.stderr


@pytest.mark.parametrize(
    ("argv", "instead"),
    [
        (("console",), "`loopdeck runs`"),
        (("run", "order_support"), "--headless"),
        (("attach", "r1"), "`loopdeck pending`"),
        (("replay", "r1"), "`loopdeck export RUN_ID`"),
    ],
)
def test_a_console_without_a_terminal_is_refused(tmp_path, argv, instead) -> None:
    """Piped, the console would draw escape codes into the pipe until killed."""
    said = subprocess.run(
        [sys.executable, "-m", "loopdeck", *argv, "--db", str(tmp_path / "s.db")],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert said.returncode == 2
    assert said.stdout == ""
    assert "the console needs a terminal, and stdin, stdout and stderr are not one" in said.stderr
    assert f"run `loopdeck {argv[0]}` in a terminal" in said.stderr and instead in said.stderr
    assert not (tmp_path / "s.db").exists()  # refused before anything was opened


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["runs", "--bogus"], "runs"),
        (["run", "service_outage", "--bogus"], "run"),
        (["approve", "r1", "c1", "--bogus"], "approve"),
        (["policy", "test", "--bogus"], "policy test"),
    ],
)
def test_an_unknown_flag_is_refused_under_its_commands_own_usage(
    cli, capsys, argv, command
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(*argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: loopdeck {command} [")
    assert f"loopdeck {command}: error: unrecognized arguments: --bogus" in err


def test_an_unknown_flag_before_the_command_is_refused_under_loopdecks_usage(cli, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli("--bogus", "runs")
    assert exit_info.value.code == 2
    assert "loopdeck: error: unrecognized arguments: --bogus" in capsys.readouterr().err


def test_a_set_value_that_does_not_pass_is_blamed_on_the_set(cli, tmp_path) -> None:
    scenario = SAMPLES / "order_support" / "scenario.toml"
    code, _, err = cli("run", "order_support", "--headless", "--set", "budgets.max_turns=0")
    assert code == 2
    assert err.startswith(f"loopdeck: --set budgets.max_turns=0 (over {scenario}): invalid")
    assert "budgets.max_turns: Input should be greater than 0" in err


def test_a_bad_value_of_the_file_and_one_of_a_set_are_each_blamed_on_their_own(
    cli, tmp_path
) -> None:
    env = tmp_path / "bad_budget"
    env.mkdir()
    (env / "scenario.toml").write_text('name = "x"\ngoal = "g"\n[budgets]\nmax_turns = -3\n')
    (env / "env.py").write_text("")
    code, _, err = cli("run", str(env), "--headless", "--set", "budgets.max_tool_calls=0")
    assert code == 2
    assert err.startswith(f"loopdeck: {env / 'scenario.toml'}: invalid scenario:")
    assert "  budgets.max_turns: Input should be greater than 0\n" in err
    assert (
        "max_tool_calls: Input should be greater than 0 (from --set budgets.max_tool_calls=0)"
        in err
    )


def test_a_set_value_a_kinds_table_refuses_is_blamed_on_the_set(cli) -> None:
    code, _, err = cli("run", "notes_mcp", "--headless", "--set", "mcp.command=3")
    assert code == 2
    assert err.startswith("loopdeck: --set mcp.command=3 (over ")
    assert "invalid [mcp]:\n  mcp.command: Input should be a valid list" in err


def test_a_table_a_set_made_is_blamed_on_the_set(cli) -> None:
    """`--set budget.max_turns=3` (for `budgets`) makes a table no kind knows: the set is
    named, not the file, which has no [budget]."""
    code, _, err = cli("check", "service_outage", "--set", "budget.max_turns=3")
    assert code == 2, err
    assert err.startswith("loopdeck: --set budget.max_turns=3 (over "), err
    assert "unknown table [budget]" in err


def test_a_gateway_on_the_scripted_model_is_refused_before_its_approve_mode(cli, tmp_path) -> None:
    code, _, err = cli(
        "gateway", "--goal", "g", "--model", "scripted", "--workdir", str(tmp_path), "--headless",
        "--", "true",
    )  # fmt: skip
    assert code == 2
    assert "gateway --model scripted" in err and "--approve" not in err


def test_a_model_litellm_routes_nowhere_is_refused_before_the_run(cli) -> None:
    code, _, err = cli("run", "order_support", "--model", "nosuch-model", "--headless",
                       "--approve", "auto")  # fmt: skip
    assert code == 2
    assert "--model nosuch-model: LiteLLM knows no provider for it" in err


def test_version_is_said() -> None:
    from loopdeck import __version__

    done = _loopdeck("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"loopdeck {__version__}"
