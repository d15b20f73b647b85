"""Working with envs outside this checkout: bundled envs by name, init-env, check, --set,
runtime needs, several calls in one scripted turn, what --json says of each call, themes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import SAMPLES

from loopdeck.bundled import bundled_folder
from loopdeck.core.scenario import ScenarioError, parse_setting
from loopdeck.operator.launch import resolve_env_dir


def _user_env(tmp_path: Path, name: str = "mine") -> Path:
    dest = tmp_path / name
    shutil.copytree(SAMPLES / "service_outage", dest, ignore=shutil.ignore_patterns("__py*"))
    # `slow-rollout` watches for 1 s, not the sample's 15 (`check` plays every script).
    scenario = dest / "scenario.toml"
    text = scenario.read_text()
    assert "args = { seconds = 15 }" in text
    scenario.write_text(text.replace("args = { seconds = 15 }", "args = { seconds = 1 }"))
    return dest


def test_the_bundled_envs_are_listed_from_any_folder(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, _ = cli("envs")
    assert code == 0
    code, payload, _ = cli("envs", "--json")
    assert {e["env"] for e in payload} >= {"order_support", "repo_triage", "service_outage"}
    assert bundled_folder("sample_envs").samefile(SAMPLES)


def test_envs_says_where_it_looked(cli, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    nowhere = tmp_path / ("a-long-folder-name-" * 5) / "nowhere"  # past 80 columns
    monkeypatch.setenv("LOOPDECK_SAMPLE_ENVS", str(nowhere))
    from loopdeck.cli import main

    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert str(nowhere) in out and "no envs there" in out  # the path never cut


def test_envs_wraps_a_scripts_description_under_itself_and_cuts_a_goal_on_its_line(
    tmp_path, monkeypatch, capsys
) -> None:
    """At 80 columns a description longer than a line wraps under itself; an env's goal stays
    on its name's line, cut with "…" (it wrapped mid-sentence: the whole goal is in `envs
    --json` and the scenario)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    from loopdeck.cli import main

    assert main(["envs"]) == 0
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert all(len(line) <= 80 for line in lines)
    described_at = None  # where the descriptions of the env's scripts begin
    continued = cut = 0
    for line in lines[1:-1]:  # between the folder's line and the closing hint
        if (named := re.match(r"    --script \S+ +", line)) is not None:
            described_at = described_at if described_at is not None else named.end()
            assert named.end() == described_at, line  # one column for an env's descriptions
        elif line.startswith(" "):  # a description's next line: never a goal's
            assert described_at is not None and line[:described_at].isspace(), line
            assert len(line) - len(line.lstrip()) == described_at, line  # under itself
            continued += 1
        else:  # the next env's header: its name, then its goal on the same line
            described_at = None
            cut += line.endswith("…")
    assert continued  # some description in the samples is longer than a line at 80
    assert cut  # and some goal is cut
    code = main(["envs", "--json"])
    goals = [env["goal"] for env in json.loads(capsys.readouterr().out)]
    assert code == 0 and any(len(goal) > 80 for goal in goals)  # whole there


def test_init_env_copies_a_sample_and_refuses_to_overwrite(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, _ = cli("init-env", "service_outage")
    assert code == 0
    assert (tmp_path / "service_outage" / "scenario.toml").is_file()
    assert not list((tmp_path / "service_outage").rglob("__pycache__"))
    code, _, err = cli("init-env", "service_outage")
    assert code == 2 and "already exists" in err
    code, _, err = cli("init-env", "no_such_env")
    assert code == 2 and "no sample env named 'no_such_env'" in err
    (tmp_path / "notes.txt").write_text("mine")
    for where in ("notes.txt/desk", "/proc/loopdeck-desk"):  # its parent a file; not writable
        code, _, err = cli("init-env", "service_outage", where)
        assert code == 2 and f"{where}: cannot create the env folder there (" in err, err
        assert "Traceback" not in err
    assert (tmp_path / "notes.txt").read_text() == "mine"


# The sample as shipped, its 15 s rollout watch included: `make stress` (CI too). `make test`
# checks the same scripts on a copy (test_check_says_why.py's init-env test).
@pytest.mark.slow
def test_check_passes_on_a_sample_env_and_runs_several_calls_in_one_turn(cli, capsys) -> None:
    from loopdeck.cli import main

    assert main(["check", "service_outage"]) == 0
    out = capsys.readouterr().out
    assert "PASS  parallel: goal_met" in out and "FAIL" not in out
    assert out.count("PASS") == len(resolve_env_dir("service_outage").scenario.scripts)


def test_check_fails_a_script_that_ends_otherwise(tmp_path, capsys) -> None:
    from loopdeck.cli import main

    env = _user_env(tmp_path)
    scenario = env / "scenario.toml"
    text = scenario.read_text().replace(
        '[scripts.loop]\nexpect = { stop_reason = "stalled" }',
        '[scripts.loop]\nexpect = { stop_reason = "goal_met" }',
    )
    scenario.write_text(
        text.replace(
            '[scripts.garbage]\nexpect = { stop_reason = "invalid_decision" }\n',
            "[scripts.garbage]\n",
        )
    )
    assert main(["check", str(env)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  loop: stalled, expected goal_met" in out
    assert "NOTE  garbage: declares no expect" in out
    assert "PASS  solve: goal_met" in out


def test_an_expect_names_a_known_stop_reason(tmp_path) -> None:
    env = _user_env(tmp_path)
    scenario = env / "scenario.toml"
    scenario.write_text(scenario.read_text().replace('"goal_met"', '"goal_reached"', 1))
    with pytest.raises(ScenarioError, match=r"scripts\.solve\.expect\.stop_reason"):
        resolve_env_dir(str(env))


def test_set_overrides_a_scenario_value_for_one_run(cli, tmp_path) -> None:
    code, out, _ = cli(
        "run", "service_outage", "--headless", "--json", "--set", "budgets.max_tool_calls=1"
    )
    assert code == 1 and out["stop_reason"] == "tool_call_limit"
    code, _, err = cli("run", "service_outage", "--headless", "--set", "budgets.max_tool_calls")
    assert code == 2 and "expected KEY=VALUE" in err
    code, _, err = cli("run", "service_outage", "--headless", "--set", "budgets.max_tool_call=1")
    assert code == 2 and "budgets.max_tool_call" in err


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("data.orders=3", ["data", "orders"], 3),
        ("model_profile.tool_calling=false", ["model_profile", "tool_calling"], False),
        ("goal=Fix it now", ["goal"], "Fix it now"),
        ('goal="quoted = kept"', ["goal"], "quoted = kept"),
        ("data.ids=[1, 2]", ["data", "ids"], [1, 2]),
    ],
)
def test_set_values_are_read_as_toml(text, key, value) -> None:
    assert parse_setting(text) == (key, value)


def test_a_missing_runtime_need_is_named_before_the_run(cli, tmp_path) -> None:
    env = _user_env(tmp_path)
    scenario = env / "scenario.toml"
    text = scenario.read_text().replace(
        'mode = "rounds"', 'mode = "rounds"\nrequires = ["json", "no_such_module_x"]', 1
    )
    scenario.write_text(text)
    code, _, err = cli("run", str(env), "--headless")
    assert code == 2
    assert "requires 'no_such_module_x'" in err and "pip install no_such_module_x" in err


def test_json_calls_carry_results_error_codes_and_retries(cli) -> None:
    code, out, _ = cli("run", "service_outage", "--script", "wrong-guess", "--headless", "--json")
    assert code == 1
    fields = {"risk", "risk_source", "result", "error_code", "error", "retries", "duration_ms"}
    assert all(fields <= set(c) for c in out["calls"])
    first, blocked = out["calls"][0], out["calls"][-1]
    assert first["result"]["replicas"] == 1 and first["error_code"] is None
    assert first["error"] is None and first["risk"] in ("read", "write")
    assert first["retries"] == 0
    assert blocked["status"] == "blocked_repeat"
    assert blocked["error_code"] == "REPEATED_CALL" and blocked["result"] is None
    assert "repeat" in blocked["error"].lower() or "same" in blocked["error"].lower()


async def test_theme_by_path_and_from_the_user_folder(tmp_path, monkeypatch) -> None:
    from loopdeck.tui import themes
    from loopdeck.tui.app import LoopdeckApp

    user = tmp_path / "config" / "themes"
    user.mkdir(parents=True)
    (user / "mine.toml").write_text('name = "mine"\nprimary = "#123456"\ndark = true\n')
    monkeypatch.setattr(themes, "user_themes_folder", lambda: user)
    app = LoopdeckApp(theme_name="mine")
    async with app.run_test():
        assert app.theme == "mine" and not app.theme_problems
    own = tmp_path / "own.toml"
    own.write_text('name = "own"\nprimary = "#654321"\ndark = false\n')
    app = LoopdeckApp(theme_name=str(own))
    async with app.run_test():
        assert app.theme == "own"
    app = LoopdeckApp(theme_name=str(tmp_path / "missing.toml"))
    async with app.run_test():
        assert app.theme == "loopdeck-dark"
        assert "missing.toml" in app.theme_problems[0]


def test_an_env_is_executed_once_per_text_and_again_once_edited(tmp_path) -> None:
    """A worker loads its env at every run: env.py runs once for each text it has (its classes
    built once), and an edit is seen by the next load."""
    env = _user_env(tmp_path)
    source = env / "env.py"
    source.write_text(source.read_text() + "\nEXECUTED = __import__('time').perf_counter_ns()\n")
    first = resolve_env_dir(str(env)).module
    again = resolve_env_dir(str(env)).module
    assert first is not None and again is first
    source.write_text(source.read_text() + "\nEDITED = True\n")
    edited = resolve_env_dir(str(env)).module
    assert edited is not first and edited.EDITED is True
    assert edited.EXECUTED != first.EXECUTED


def test_a_scenario_parsed_once_is_copied_for_each_load_and_its_settings(tmp_path) -> None:
    """The parsed TOML is kept per text; each load's `--set` changes its own copy only."""
    env = _user_env(tmp_path)
    changed = resolve_env_dir(str(env), ["goal=changed", "budgets.max_turns=3"]).scenario
    plain = resolve_env_dir(str(env)).scenario
    assert (changed.goal, changed.budgets.max_turns) == ("changed", 3)
    assert plain.goal != "changed" and plain.budgets.max_turns != 3
    scenario = env / "scenario.toml"
    scenario.write_text(scenario.read_text().replace("max_turns =", "max_turns = 7 #", 1))
    assert resolve_env_dir(str(env)).scenario.budgets.max_turns == 7
