"""Env authoring says why: init-env names the copy after its folder, `check` names a FAIL's
first cause (`-v`: the calls and the traceback), env code that raised is said with its line,
and a script the runtime would refuse is a scenario error before any run."""

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
    _short_rollout(dest)
    return dest


def _short_rollout(env: Path) -> None:
    """`slow-rollout` watches for 1 s, not the sample's 15: `check` plays every script, and
    these tests are about the causes it names, not the wait."""
    _edit(env / "scenario.toml", "args = { seconds = 15 }", "args = { seconds = 1 }")


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _line_of(path: Path, code: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if code in line)


SCALE_BODY = "        self.replicas = args.replicas\n        return {"
CRASH = "        per_replica = 100 // (args.replicas - 3)\n"


def test_init_env_names_the_copy_after_its_folder(cli, tmp_path, capsys) -> None:
    code, _, _ = cli("init-env", "service_outage", str(tmp_path / "mydesk"))
    assert code == 0
    scenario = tomllib.loads((tmp_path / "mydesk" / "scenario.toml").read_text())
    assert scenario["name"] == "mydesk"
    assert scenario["goal"].startswith("Bring the orders service back")  # the rest is kept
    _short_rollout(tmp_path / "mydesk")
    from loopdeck.cli import main

    assert main(["check", str(tmp_path / "mydesk")]) == 0
    assert capsys.readouterr().out.startswith("checking mydesk (")


def test_a_fail_names_the_tools_exception_and_its_line(tmp_path, capsys) -> None:
    from loopdeck.cli import main

    env = _user_env(tmp_path)
    _edit(env / "env.py", SCALE_BODY, CRASH + SCALE_BODY)
    line = _line_of(env / "env.py", "per_replica = 100")
    assert main(["check", str(env)]) == 1
    out = capsys.readouterr().out
    fail = next(x for x in out.splitlines() if x.startswith("FAIL  solve:"))
    assert fail.startswith("FAIL  solve: stalled, expected goal_met")
    assert (
        "first cause: tool scale_service raised ZeroDivisionError: integer division or modulo "
        f"by zero (env.py:{line}, in scale_service)"
    ) in fail
    assert "Traceback" not in out  # only with -v


def test_check_v_prints_the_runs_calls_and_the_traceback(tmp_path, capsys) -> None:
    from loopdeck.cli import main

    env = _user_env(tmp_path)
    _edit(env / "env.py", SCALE_BODY, CRASH + SCALE_BODY)
    assert main(["check", "-v", str(env)]) == 1
    out = capsys.readouterr().out
    solve = out[out.index("FAIL  solve:") : out.index("PASS  wrong-guess:")]
    assert '      call set_config {"key": "db_url", "value": "postgres://orders-db-v2' in solve
    assert '      call scale_service {"replicas": 3} → outcome_unknown' in solve
    assert "        Traceback (most recent call last):" in solve
    assert f'          File "{env / "env.py"}", line' in solve
    assert "            per_replica = 100 // (args.replicas - 3)" in solve
    assert "        ZeroDivisionError: integer division or modulo by zero" in solve


def test_a_refused_reply_is_the_first_cause(tmp_path, capsys) -> None:
    """A turn marked invalid = true plays; when the run then fails, the validator says why."""
    from loopdeck.cli import main

    env = _user_env(tmp_path)
    _edit(env / "env.py", "Field(ge=0, le=20)", "Field(ge=0, le=2)")
    scenario = env / "scenario.toml"
    marked = "args = { replicas = 3 }\ninvalid = true\n"
    scenario.write_text(scenario.read_text().replace("args = { replicas = 3 }\n", marked))
    assert main(["check", str(env), "-v"]) == 1
    out = capsys.readouterr().out
    fail = next(x for x in out.splitlines() if x.startswith("FAIL  solve:"))
    assert (
        "first cause: reply refused: arguments of scale_service are invalid: replicas: "
        "Input should be less than or equal to 2"
    ) in fail
    assert "      reply refused (correction 1): arguments of scale_service" in out


@pytest.mark.parametrize("command", [["check"], ["run", "--headless", "--db", "{db}"]])
def test_a_script_naming_an_unknown_tool_is_refused_before_the_run(cli, tmp_path, command) -> None:
    env = _user_env(tmp_path)
    _edit(env / "scenario.toml", 'step = 4\ntool = "get_status"', 'step = 4\ntool = "get_stats"')
    argv = [part.format(db=tmp_path / "runs.db") for part in command]
    code, _, err = cli(*argv[:1], str(env), *argv[1:])
    assert code == 2
    assert (
        "scenario.toml: script 'solve', executor turn 4 (step 4): unknown tool 'get_stats'" in err
    )
    assert "allowed tools: get_status, restart_service" in err
    if command[0] == "run":  # nothing ran, nothing was recorded
        code, runs, _ = cli("runs", "--db", str(tmp_path / "runs.db"), "--json")
        assert code == 0 and runs == []


def test_a_script_whose_arguments_its_tool_refuses_is_refused(cli, tmp_path) -> None:
    env = _user_env(tmp_path)
    _edit(env / "env.py", "Field(ge=0, le=20)", "Field(ge=0, le=2)")
    code, _, err = cli("check", str(env))
    assert code == 2
    # The first script (by name) that scales past the new bound is named, with its turn.
    assert re.search(
        r"script '[\w-]+', executor turn \d+ \(step \d+\): arguments of scale_service are "
        r"invalid: replicas: Input should be less than or equal to 2",
        err,
    ), err
    assert "mark the turn invalid = true" in err


def test_a_turn_marked_invalid_must_be_refused(cli, tmp_path) -> None:
    env = _user_env(tmp_path)
    _edit(
        env / "scenario.toml",
        'step = 1\ntool = "get_status"',
        'invalid = true\nstep = 1\ntool = "get_status"',
    )
    code, _, err = cli("check", str(env))
    assert code == 2
    assert "script 'solve', executor turn 1 (step 1): marked invalid = true" in err


def test_env_code_that_raises_is_said_with_its_line(cli, tmp_path) -> None:
    env = _user_env(tmp_path)
    _edit(
        env / "env.py",
        "    return ServiceOutage(workdir, data)",
        "    return ServiceOutage(workdir, data['nope'])",
    )
    line = _line_of(env / "env.py", "data['nope']")
    code, _, err = cli("check", str(env))
    assert code == 2
    assert f"make_env failed: KeyError: 'nope' (env.py:{line}, in make_env)" in err


async def test_a_snapshot_that_raises_stops_the_run_naming_its_line(tmp_path) -> None:
    from conftest import run_env

    from loopdeck.core.states import StopReason

    env = _user_env(tmp_path)
    _edit(
        env / "env.py",
        '        return {"db_url": self.config["db_url"]',
        '        return {"db_url": self.config["db_uri"]',
    )
    line = _line_of(env / "env.py", 'self.config["db_uri"]')
    outcome, _ = await run_env(env, "solve")
    assert outcome.stop_reason is StopReason.CRASHED
    assert outcome.detail == f"KeyError: 'db_uri' (env.py:{line}, in snapshot)"


def test_outside_text_in_a_cause_is_shown_never_obeyed(tmp_path, capsys) -> None:
    from loopdeck.cli import main

    env = _user_env(tmp_path)
    _edit(env / "env.py", SCALE_BODY, '        raise ValueError("[red]x\\x1b[2J")\n' + SCALE_BODY)
    assert main(["check", str(env), "-v"]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "tool scale_service raised ValueError: [red]x\\u001b[2J (env.py:" in out


def test_a_tools_wrong_risk_is_refused_at_its_line(cli, tmp_path) -> None:
    env = _user_env(tmp_path)
    _edit(env / "env.py", '    @tool(risk="write")', '    @tool(risk="writ")')
    line = _line_of(env / "env.py", 'risk="writ"')
    code, _, err = cli("check", str(env))
    assert code == 2
    assert "@tool(risk='writ'): a tool's risk is 'read' or 'write'" in err
    assert f"env.py:{line}" in err and "pydantic" not in err


def test_tool_marks_a_method_without_its_parentheses(cli, tmp_path) -> None:
    env = _user_env(tmp_path)
    _edit(env / "env.py", "    @tool()\n", "    @tool\n")
    code, _, err = cli("check", str(env))
    assert code == 0, err


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            "        return reasons\n",
            "        return not reasons\n",
            "ServiceOutage.unmet returned False: it returns a list of the reasons",
        ),
        (
            "    def unmet(self,",
            "    def unmett(self,",
            "ServiceOutage has no unmet(self, snapshot): an env says why its goal is not met",
        ),
    ],
)
def test_a_goal_check_that_says_nothing_readable_is_named(tmp_path, capsys, old, new, said) -> None:
    from loopdeck.cli import main

    env = _user_env(tmp_path)
    _edit(env / "env.py", old, new)
    assert main(["check", str(env)]) == 1  # a run crashed: never read as a met goal
    assert said in capsys.readouterr().out


def test_a_pass_says_env_code_that_raised_on_the_way(tmp_path, capsys) -> None:
    from loopdeck.cli import main

    env = _user_env(tmp_path)
    _edit(env / "env.py", "        last_error = None\n", "        last_error = {}['nope']\n")
    line = _line_of(env / "env.py", "{}['nope']")
    main(["check", str(env)])
    out = capsys.readouterr().out
    passed = re.search(r"PASS  parallel: .*\n(.*)\n", out)
    assert passed is not None, out
    assert passed[1] == (
        f"      but env code raised: tool get_status raised KeyError: 'nope' (env.py:{line},"
        " in get_status)"
    )


def test_a_check_with_no_expect_says_it_checked_nothing(tmp_path, capsys) -> None:
    from loopdeck.cli import main

    env = _user_env(tmp_path)
    scenario = env / "scenario.toml"
    scenario.write_text(re.sub(r"(?m)^expect = .*\n", "", scenario.read_text()))
    assert main(["check", str(env)]) == 1  # a suite of no test never passes
    out = capsys.readouterr().out
    assert "all expectations met" not in out
    assert out.rstrip().endswith(
        "nothing checked: no script declares an expect = { stop_reason = ... }"
    )
