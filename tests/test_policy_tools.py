"""The policy author's tools through the CLI: `policy test` (exit 1 naming a failing test),
`run --policy` refusing a policy whose test fails, `policy explain` (which rule decided, and
why), `policy replay` (where another policy decides differently, and the prompts it leaves),
and the provenance in `run --json` and `export`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES

POLICY_ENV = str(Path(__file__).parent / "envs" / "policy")
POLICY = """
untrusted = ["read_issue"]
[[rule]]
id = "src-writes"
effect = "allow"
when = 'call.tool == "write_file" && call.args.path.startsWith("src/") && state.unchanged'
[[rule]]
id = "after-untrusted"
effect = "ask"
when = "run.tainted"
message = "the run has read an issue anyone can write"
[[test]]
name = "a module"
call = { tool = "write_file", args = { path = "src/a.py" } }
expect = "allow"
"""
WRONG = (
    POLICY
    + """
[[test]]
name = "passwd"
call = { tool = "write_file", args = { path = "/etc/passwd" } }
expect = "deny"
"""
)
Cli = Callable[..., tuple[int, Any, str]]


@pytest.fixture(autouse=True)
def _no_user_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPDECK_USER_POLICY", "none")


def _policy(tmp_path: Path, text: str = POLICY, name: str = "policy.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_policy_test_fails_on_a_wrong_expectation_naming_it(
    cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, wrong = _policy(tmp_path), _policy(tmp_path, WRONG, "wrong.toml")
    code, _, err = cli("policy", "test", good)
    assert code == 0 and err == ""
    code, _, err = cli("policy", "test", good, wrong)
    assert code == 1 and "1 policy test failed" in err
    code, out, _ = cli("policy", "test", wrong, "--json")
    assert code == 1
    assert [(t["test"], t["passed"], t["got"]) for t in out] == [
        ("test 1 (a module)", True, "allow"),
        ("test 2 (passwd)", False, "ask"),
    ]


def test_policy_test_names_the_failing_test_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopdeck.cli import main

    assert main(["policy", "test", _policy(tmp_path, WRONG)]) == 1
    out = capsys.readouterr().out
    assert "FAIL test 2 (passwd): expected deny, got ask (no rule decides)" in out
    assert "ok   test 1 (a module): allow by rule src-writes" in out


def test_policy_test_names_the_error_of_a_condition_that_cannot_be_evaluated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A deny whose condition fails on the test's call asks: the test says why (the error to
    fix), not only "got ask by rule big"."""
    from loopdeck.cli import main

    text = """
[[rule]]
id = "big"
effect = "deny"
when = "call.args.n > 3"
[[test]]
name = "a word for n"
call = { tool = "write_file", args = { n = "abc" } }
expect = "deny"
"""
    assert main(["policy", "test", _policy(tmp_path, text)]) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "a word for n" in line)
    assert "got ask by rule big (its condition could not be evaluated: " in line, line


def test_a_run_refuses_a_policy_whose_test_fails(cli: Cli, tmp_path: Path) -> None:
    wrong = _policy(tmp_path, WRONG)
    code, _, err = cli("run", POLICY_ENV, "--script", "writes", "--policy", wrong, "--headless")
    assert code == 2
    assert f"{wrong}: test 2 (passwd): expected deny, got ask" in err
    nope = str(tmp_path / "nope.toml")
    code, _, err = cli("run", POLICY_ENV, "--script", "writes", "--policy", nope, "--headless")
    assert code == 2 and "no such file" in err


def test_explain_says_which_rule_decided_and_why(cli: Cli, tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    code, out, _ = cli("run", POLICY_ENV, "--script", "tainted", "--policy", policy,
                       "--approve", "auto", "--headless", "--json", "--run-id", "t1")  # fmt: skip
    assert code == 1  # the script never writes done.txt
    decided = {c["call_id"]: c["decided_by"] for c in out["calls"]}
    assert decided["c1"]["who"] == "rule" and decided["c1"]["rule_id"] == "src-writes"
    assert decided["c3"] == {"who": "default", "channel": "--approve auto"}
    code, out, _ = cli("policy", "explain", "t1", "c3", "--json")
    assert code == 0
    (ask,) = out
    rules = {r["rule"]: r for r in ask["rules"]}
    assert rules["run:after-untrusted"]["decides"] and rules["run:after-untrusted"]["says"] == "ask"
    assert rules["run:src-writes"]["says"] == "allow" and not rules["run:src-writes"]["decides"]
    assert ask["facts"]["run"]["tainted"] is True and ask["recorded"] == "ask"
    code, _, _ = cli("policy", "explain", "t1", "c9")
    assert code == 1


def test_explain_in_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from loopdeck.cli import main

    policy = _policy(tmp_path)
    main(["run", POLICY_ENV, "--script", "tainted", "--policy", policy, "--approve", "auto",
          "--headless", "--run-id", "t2"])  # fmt: skip
    capsys.readouterr()
    assert main(["policy", "explain", "t2", "c3"]) == 0
    out = capsys.readouterr().out
    assert f"policy in force: run {policy} (enforce, sha256 " in out
    assert "decided: asked, approved by the default (--approve auto)" in out
    assert "→ run:after-untrusted [ask] holds: run.tainted" in out
    assert "message: the run has read an issue anyone can write" in out
    assert "run.tainted=true" in out and 'run.read=["write_file", "read_issue"]' in out


def test_replay_lists_where_another_policy_decides_differently(cli: Cli, tmp_path: Path) -> None:
    code, _, _ = cli("run", POLICY_ENV, "--script", "writes", "--approve", "auto",
                     "--headless", "--run-id", "w1")  # fmt: skip
    code, out, _ = cli("policy", "replay", "w1", "--policy", _policy(tmp_path), "--json")
    assert code == 0
    assert (out["asks"], out["prompts"], out["prompts_under_policy"]) == (4, 4, 1)
    differ = [d["call_id"] for d in out["decisions"] if d["differs"]]
    assert differ == ["c1", "c2", "c4"]
    c1 = out["decisions"][0]
    assert c1["recorded_by"] == {"who": "default", "channel": "--approve auto"}
    assert c1["would"] == "allow" and c1["would_by"]["rule_id"] == "src-writes"
    code, out, _ = cli("policy", "explain", "w1", "c3", "--policy", _policy(tmp_path), "--json")
    assert code == 0 and out[0]["would"] == "ask" and out[0]["would_by"] is None


def test_replay_names_the_policy_file_with_the_files_own_sha256(
    cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopdeck.cli import main

    policy = _policy(tmp_path)
    sha = hashlib.sha256(Path(policy).read_bytes()).hexdigest()
    cli("run", POLICY_ENV, "--script", "writes", "--approve", "auto", "--headless",
        "--run-id", "w2")  # fmt: skip
    assert main(["policy", "test", policy]) == 0
    assert f"sha256 {sha[:12]}" in capsys.readouterr().out
    assert main(["policy", "replay", "w2", "--policy", policy]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"run w2 replayed under {policy} (sha256 {sha[:12]}): 4 asks")
    code, out, _ = cli("policy", "replay", "w2", "--policy", policy, "--json")
    assert code == 0 and out["sha256"] == sha


def test_replay_of_a_run_under_its_own_policy_differs_nowhere(cli: Cli, tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    cli("run", POLICY_ENV, "--script", "tainted", "--policy", policy, "--approve", "auto",
        "--headless", "--run-id", "t3")  # fmt: skip
    code, out, _ = cli("policy", "replay", "t3", "--policy", policy, "--json")
    assert code == 0 and not any(d["differs"] for d in out["decisions"])
    assert out["prompts"] == out["prompts_under_policy"] == 1


def test_export_carries_who_decided(
    cli: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopdeck.cli import main

    cli("run", POLICY_ENV, "--script", "writes", "--policy", _policy(tmp_path), "--approve",
        "auto", "--headless", "--run-id", "e1")  # fmt: skip
    assert main(["export", "e1"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    decided = {r["call_id"]: r["decided_by"] for r in rows if r["kind"] == "approval_decided"}
    assert decided["c1"]["who"] == "rule" and len(decided["c1"]["policy_sha256"]) == 64
    assert decided["c3"] == {"who": "default", "channel": "--approve auto"}
    (in_force,) = [r for r in rows if r["kind"] == "policy_in_force"]
    assert in_force["levels"][0]["text"] == POLICY


@pytest.mark.slow  # repo_triage's goal check runs its test suite after each write: seconds
def test_repo_triages_policy_lets_its_writes_under_src_through(cli: Cli) -> None:
    code, _, _ = cli("policy", "test", str(SAMPLES / "repo_triage" / "policy.toml"))
    assert code == 0
    code, out, _ = cli("run", "repo_triage", "--script", "split", "--approve", "auto",
                       "--headless", "--json")  # fmt: skip
    assert code == 0 and out["stop_reason"] == "goal_met"
    by = [(c["args"]["path"], (c["decided_by"] or {}).get("who")) for c in out["calls"]
          if c["tool"] == "write_file"]  # fmt: skip
    assert by == [
        ("src/calculator/__init__.py", "rule"),
        ("src/calculator/arithmetic.py", "rule"),
        ("src/calculator/powers.py", "rule"),
        ("calculator.py", "default"),
    ]


def test_explain_prints_a_condition_written_over_lines_under_its_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopdeck.cli import main

    one_line = 'call.tool == "write_file" && call.args.path.startsWith("src/") && state.unchanged'
    split = POLICY.replace(
        f"when = '{one_line}'",
        """when = '''call.tool == "write_file"
  && call.args.path.startsWith("src/")

  && state.unchanged'''""",
    )
    policy = _policy(tmp_path, split)
    main(["run", POLICY_ENV, "--script", "tainted", "--policy", policy, "--approve", "auto",
          "--headless", "--run-id", "t3"])  # fmt: skip
    capsys.readouterr()
    assert main(["policy", "explain", "t3", "c1"]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if "run:src-writes [allow]" in line)
    assert out[at].endswith('holds: call.tool == "write_file"'), out[at]
    assert out[at + 1 : at + 3] == [
        '      && call.args.path.startsWith("src/")',
        "      && state.unchanged",
    ]
    assert out[at + 3].startswith("    run:after-untrusted [ask]"), out[at + 3]
