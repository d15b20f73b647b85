"""A newcomer making an env of their own: init-env names any folder (its name TOML that reads
back the same, never a half-made folder left), a misspelled table is named with the one
meant, scenario numbers and booleans are what they say, a check that checked nothing fails,
and a goal check that hangs is stopped by its bound."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest
from conftest import SAMPLES


def _user_env(tmp_path: Path, name: str = "mine") -> Path:
    dest = tmp_path / name
    shutil.copytree(SAMPLES / "service_outage", dest, ignore=shutil.ignore_patterns("__py*"))
    _edit(dest / "scenario.toml", "args = { seconds = 15 }", "args = { seconds = 1 }")
    return dest


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("name", ["服务_env", "café", "x\\y", 'say "hi"'])
def test_init_env_names_any_folder_as_toml_that_reads_back(cli, tmp_path, name) -> None:
    dest = tmp_path / name
    code, _, err = cli("init-env", "service_outage", str(dest))
    assert code == 0, err
    scenario = tomllib.loads((dest / "scenario.toml").read_text(encoding="utf-8"))
    assert scenario["name"] == name


def test_init_env_leaves_no_half_made_folder(cli, tmp_path, monkeypatch) -> None:
    from loopdeck.cli import env_commands

    def full(scenario: Path, line: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(env_commands, "_rename", full)
    dest = tmp_path / "mine"
    code, _, err = cli("init-env", "service_outage", str(dest))
    assert code == 2
    assert f"{dest}: cannot name the env in its scenario.toml (No space left on device)" in err
    assert not dest.exists()


@pytest.mark.parametrize(
    ("table", "meant"), [("budget", "budgets"), ("script", "scripts"), ("datas", "data")]
)
def test_a_misspelled_table_is_named_with_the_one_meant(cli, tmp_path, table, meant) -> None:
    env = _user_env(tmp_path)
    scenario = env / "scenario.toml"
    if meant == "scripts":
        scenario.write_text(scenario.read_text() + f"\n[{table}]\nx = 1\n")
    else:
        _edit(scenario, f"[{meant}]\n", f"[{table}]\n")
    code, _, err = cli("check", str(env))
    assert code == 2
    assert f"unknown table [{table}]; did you mean [{meant}]?" in err


def test_a_misspelled_table_set_on_the_command_line_names_the_set(cli, tmp_path) -> None:
    env = _user_env(tmp_path)
    code, _, err = cli("check", str(env), "--set", "budget.max_turns=3")
    assert code == 2
    assert "--set budget.max_turns=3" in err and "did you mean [budgets]?" in err


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            "max_turns = 30",
            "max_turn = 30",
            "budgets.max_turn: unknown key; did you mean max_turns?",
        ),
        (
            'tool = "get_status"',
            'tol = "get_status"',
            "scripts.solve.executor turn 1.tol: unknown key; did you mean tool?",
        ),
        (
            "description = ",
            "descripton = ",
            "scripts.solve.descripton: unknown key; did you mean description?",
        ),
        ('goal = "', 'gaol = "', "  gaol: unknown key; did you mean goal?"),
    ],
)
def test_a_misspelled_key_is_named_with_the_one_meant(cli, tmp_path, old, new, said) -> None:
    env = _user_env(tmp_path)
    _edit(env / "scenario.toml", old, new)
    code, _, err = cli("check", str(env))
    assert code == 2
    assert said in err, err


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("\nacp = [", "\nacpp = [", "agent.acpp: unknown key; did you mean acp?"),
        (
            'kind = "read"',
            'knd = "read"',
            "scripts.solve.turns #1.steps #2.knd: unknown key; did you mean kind?",
        ),
    ],
)
def test_a_misspelled_key_of_an_agents_table_is_named_with_the_one_meant(
    cli, tmp_path, old, new, said
) -> None:
    env = tmp_path / "mine"
    shutil.copytree(SAMPLES / "calc_acp", env, ignore=shutil.ignore_patterns("__py*"))
    _edit(env / "scenario.toml", old, new)
    code, _, err = cli("check", str(env))
    assert code == 2
    assert said in err, err


def test_a_key_close_to_none_is_said_unknown_alone(cli, tmp_path) -> None:
    env = _user_env(tmp_path)
    _edit(env / "scenario.toml", "max_turns = 30", "zzz = 30")
    code, _, err = cli("check", str(env))
    assert code == 2
    assert "budgets.zzz: unknown key\n" in err + "\n", err


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            "max_turns = 30",
            'max_turns = "30"',
            "budgets.max_turns: a number, not the text '30'",
        ),
        (
            "repeat = true",
            'repeat = "yes"',
            "scripts.loop.executor turn 1.repeat: true or false, not the text 'yes'",
        ),
        (
            "max_cost_usd = 0.5",
            "max_cost_usd = true",
            "budgets.max_cost_usd: a number, not true",
        ),
        (
            "approval_ttl_s = 300",
            'approval_ttl_s = "300"',
            "approval_ttl_s: a number, not the text '300'",
        ),
    ],
)
def test_scenario_numbers_and_booleans_are_strict(cli, tmp_path, old, new, said) -> None:
    env = _user_env(tmp_path)
    _edit(env / "scenario.toml", old, new)
    code, _, err = cli("check", str(env))
    assert code == 2
    assert said in err, err


def test_a_set_that_gives_text_for_a_number_is_named(cli, tmp_path) -> None:
    env = _user_env(tmp_path)
    code, _, err = cli("check", str(env), "--set", "budgets.max_turns=thirty")
    assert code == 2
    assert "budgets.max_turns: a number, not the text 'thirty'" in err
    assert "--set budgets.max_turns=thirty" in err


def test_a_check_of_no_scripts_at_all_fails(tmp_path, capsys) -> None:
    from loopdeck.cli import main

    env = _user_env(tmp_path)
    scenario = env / "scenario.toml"
    text = scenario.read_text()
    scenario.write_text(text[: text.index("[scripts.")])
    assert main(["check", str(env)]) == 1
    assert (
        capsys.readouterr()
        .out.rstrip()
        .endswith("nothing checked: scenario.toml declares no [scripts.NAME]")
    )


def test_a_check_that_checked_nothing_fails(tmp_path, capsys) -> None:
    from loopdeck.cli import main

    env = _user_env(tmp_path)
    scenario = env / "scenario.toml"
    scenario.write_text(re.sub(r"(?m)^expect = .*\n", "", scenario.read_text()))
    assert main(["check", str(env)]) == 1
    out = capsys.readouterr().out
    assert out.rstrip().endswith(
        "nothing checked: no script declares an expect = { stop_reason = ... }"
    )


HANG = "        reasons = []\n"


async def test_a_goal_check_that_hangs_stops_the_run_at_its_bound(tmp_path) -> None:
    from conftest import run_env

    from loopdeck.core.states import StopReason

    env = _user_env(tmp_path)
    _edit(
        env / "env.py",
        HANG,
        HANG + "        if snapshot['replicas'] == 3:\n            __import__('time').sleep(30)\n",
    )
    _edit(env / "env.py", "class ServiceOutage(Environment):\n",
          "class ServiceOutage(Environment):\n    goal_check_timeout_s = 0.5\n")  # fmt: skip
    outcome, _ = await run_env(env, "solve")
    assert outcome.stop_reason is StopReason.TOOL_FAILURE
    assert outcome.detail.startswith(
        "goal check: ServiceOutage.unmet did not return within 0.5s (its goal_check_timeout_s)"
    )  # (its bound, not the run's deadline: the detail names which stopped it)


@pytest.mark.parametrize("line", ["goal_check_timeout_s = 5", 'goal_check = ["false"]'])
def test_a_goal_check_command_is_refused_where_nothing_runs_it(cli, tmp_path, line) -> None:
    """A Python env's goal check is its unmet(): a `goal_check` command there was silently
    never run (the run ended goal_met)."""
    env = _user_env(tmp_path)
    _edit(env / "scenario.toml", 'mode = "rounds"\n', f'mode = "rounds"\n{line}\n')
    code, _, err = cli("check", str(env))
    assert code == 2
    assert f"{line.split()[0]}: a goal_check command and its goal_check_timeout_s are an" in err


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (
            "data.initial_replica=5",
            "[data] has no key 'initial_replica'; did you mean data.initial_replicas?",
        ),
        ("data.zzz=5", "[data] has no key 'zzz' (--set changes a value the scenario has"),
    ],
)
def test_a_set_of_a_data_key_the_scenario_lacks_is_refused(cli, tmp_path, setting, said) -> None:
    """The env reads its `data`: a misspelled key there was set, never read, and the run
    went on with the file's value, saying nothing."""
    env = _user_env(tmp_path)
    code, _, err = cli(
        "run", str(env), "--headless", "--set", setting, "--db", str(tmp_path / "s.db")
    )
    assert code == 2
    assert f"--set {setting} (over {env / 'scenario.toml'}): {said}" in err, err
    assert not (tmp_path / "s.db").exists()


def test_a_set_of_a_nested_data_key_is_checked_at_each_level(cli, tmp_path) -> None:
    env = tmp_path / "mine"
    shutil.copytree(SAMPLES / "order_support", env, ignore=shutil.ignore_patterns("__py*"))
    code, _, err = cli("check", str(env), "--set", 'data.orders.ORD-1042.adress="x"')
    assert code == 2
    assert "[data.orders.ORD-1042] has no key 'adress'; did you mean" in err, err
    assert "data.orders.ORD-1042.address?" in err
    from loopdeck.core.scenario import load_scenario

    scenario = load_scenario(env / "scenario.toml", ['data.orders.ORD-1042.address="9 Elm"'])
    assert scenario.data["orders"]["ORD-1042"]["address"] == "9 Elm"
