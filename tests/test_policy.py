"""Policy as code, the language and the file: every attribute a rule reads decides a case,
levels combine deny over ask over allow, a rule that cannot be evaluated never lets a call
through, and a file that is wrong (or whose inline test fails) is refused by name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from loopdeck.policy.cases import CaseMemory, case_facts, run_cases
from loopdeck.policy.document import PolicyCase, PolicyError
from loopdeck.policy.engine import Policy, RuleBook
from loopdeck.policy.gate import RunPolicy
from loopdeck.policy.loading import load_policy, read_level


@pytest.fixture(autouse=True)
def _no_user_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPDECK_USER_POLICY", "none")


def _file(tmp_path: Path, text: str, name: str = "policy.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _rule(rule_id: str, effect: str, when: str, message: str = "") -> str:
    said = f"message = {message!r}\n"
    return f"[[rule]]\nid = {rule_id!r}\neffect = {effect!r}\nwhen = '''{when}'''\n{said}"


def _case(**fields: Any) -> PolicyCase:
    fields.setdefault("call", {"tool": "write_file", "args": {"path": "src/a.py"}})
    return PolicyCase.model_validate({"expect": "ask", **fields})


def _decide(policy: Policy, case: PolicyCase) -> tuple[str, str]:
    """(effect, the deciding rule's id) of one case, every rule's own attributes the case's."""
    evaluation = policy.evaluate(case_facts(case), CaseMemory(case))
    return evaluation.effect, evaluation.rule.id if evaluation.rule else ""


NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
# Each attribute a rule reads: a condition on it, a case where it holds, one where it does not.
ATTRIBUTES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("call.tool", 'call.tool == "write_file"', {}, {"call": {"tool": "delete_file"}}),
    ("call.args", 'call.args.path.startsWith("src/")', {},
     {"call": {"tool": "write_file", "args": {"path": "docs/a.md"}}}),
    ("call.risk", 'call.risk == "read"', {"call": {"tool": "read", "risk": "read"}}, {}),
    ("call.risk_source", 'call.risk_source == "server says read-only"',
     {"call": {"tool": "w", "risk_source": "server says read-only"}}, {}),
    ("call.kind", 'call.kind == "acp"', {"call": {"tool": "edit", "kind": "acp"}}, {}),
    ("call.title", 'call.title.endsWith("calc.py")',
     {"call": {"tool": "edit", "title": "edit: calc.py"}}, {}),
    ("state.unchanged", "!state.unchanged", {"state": {"unchanged": False}}, {}),
    ("state.hash", 'state.hash == "s9"', {"state": {"hash": "s9"}}, {}),
    ("state.unchanged_since_rule", "state.unchanged_since_rule",
     {"rule": {"last_state": "s1"}}, {"rule": {"last_state": "s0"}}),
    ("run.env", 'run.env == "prod"', {"run": {"env": "prod"}}, {}),
    ("run.budget", "run.budget.cost_usd >= 0.8", {"run": {"budget": {"cost_usd": 0.85}}},
     {"run": {"budget": {"cost_usd": 0.5}}}),
    ("run.repeats", "run.repeats > 0", {"run": {"repeats": 2}}, {}),
    ("run.read", '"read_issue" in run.read', {"run": {"read": ["read_issue"]}}, {}),
    ("run.tainted", "run.tainted", {"run": {"read": ["fetch_url"]}},
     {"run": {"read": ["read_file"]}}),
    ("run.round", "run.round >= 3", {"run": {"round": 3}}, {}),
    ("rule.uses", "rule.uses >= 5", {"rule": {"uses": 5}}, {"rule": {"uses": 4}}),
    ("rule.age_s", "rule.age_s > 600.0", {"rule": {"age_s": 601}}, {"rule": {"age_s": 5}}),
    ("time", 'time > timestamp("2026-01-01T00:00:00Z")', {"time": NOW},
     {"time": datetime(2025, 6, 1, tzinfo=UTC)}),
    ("time.getHours", "time.getHours() < 6", {"time": NOW - timedelta(hours=8)}, {"time": NOW}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "when", "holds", "fails"), ATTRIBUTES, ids=[a[0] for a in ATTRIBUTES]
)
def test_each_attribute_decides_a_case(
    tmp_path: Path, name: str, when: str, holds: dict[str, Any], fails: dict[str, Any]
) -> None:
    path = _file(tmp_path, 'untrusted = ["fetch_*"]\n' + _rule("on-it", "deny", when))
    policy = Policy([read_level("run", path)])
    assert _decide(policy, _case(**{"time": NOW, **holds})) == ("deny", "on-it")
    assert _decide(policy, _case(**{"time": NOW, **fails})) == ("none", "")


def test_deny_wins_across_levels_and_no_level_widens_another(tmp_path: Path) -> None:
    secrets = _rule("no-secrets", "deny", 'call.args.path.startsWith(".env")')
    user = _file(tmp_path, secrets, "user.toml")
    writes = _rule("writes", "allow", 'call.tool == "write_file"')
    env = _file(tmp_path, writes + _rule("docs", "ask", 'call.args.path.startsWith("docs/")'),
                "env.toml")  # fmt: skip
    deletes = _rule("no-deletes", "deny", 'call.tool == "delete_file"')
    run = _file(tmp_path, _rule("everything", "allow", "true") + deletes, "run.toml")
    policy = Policy([read_level("run", run), read_level("user", user), read_level("env", env)])
    assert [level.name for level in policy.levels] == ["user", "env", "run"]
    secret = _case(call={"tool": "write_file", "args": {"path": ".env"}})
    assert _decide(policy, secret) == ("deny", "no-secrets")  # the run's allow cannot widen it
    deleted = _case(call={"tool": "delete_file", "args": {"path": "src/a.py"}})
    assert _decide(policy, deleted) == ("deny", "no-deletes")  # the run level denies too
    docs = _case(call={"tool": "write_file", "args": {"path": "docs/a.md"}})
    assert _decide(policy, docs) == ("ask", "docs")  # ask over two allows
    # Between equals, the broadest level's rule is the one recorded.
    assert _decide(policy, _case()) == ("allow", "writes")
    evaluation = policy.evaluate(case_facts(_case()), CaseMemory(_case()))
    assert evaluation.verdict().decided_by is not None
    assert evaluation.verdict().decided_by.level == "env"
    assert set(evaluation.verdict().matched) == {"env:writes (allow)", "run:everything (allow)"}


def test_a_rule_that_cannot_be_evaluated_never_lets_a_call_through(tmp_path: Path) -> None:
    path = _file(tmp_path, _rule("src", "allow", 'call.args.path.startsWith("src/")')
                 + _rule("no-etc", "deny", 'call.args.file.startsWith("/etc")'))  # fmt: skip
    policy = Policy([read_level("run", path)])
    evaluation = policy.evaluate(case_facts(_case()), CaseMemory(_case()))
    assert (evaluation.effect, evaluation.rule and evaluation.rule.id) == ("ask", "no-etc")
    verdict = evaluation.verdict()
    assert verdict.errors == ("run:no-etc: no such member in mapping: 'file'",)
    assert verdict.decided_by is not None and "could not be evaluated" in verdict.decided_by.why
    no_path = _case(call={"tool": "write_file", "args": {"file": "a"}})
    assert _decide(policy, no_path) == ("none", "")  # a failed allow allows nothing


def test_a_policy_with_a_failing_test_refuses_to_load_naming_it(tmp_path: Path) -> None:
    text = _rule("writes", "allow", 'call.tool == "write_file"') + (
        '[[test]]\nname = "passwd"\ncall = { tool = "write_file", args = { path = "/etc/passwd" } }'
        '\nexpect = "deny"\n'
    )
    path = _file(tmp_path, text)
    with pytest.raises(PolicyError) as refused:
        load_policy(None, path)
    assert str(refused.value).startswith(
        f"{path}: test 1 (passwd): expected deny, got allow by rule writes"
    )
    (result,) = run_cases(read_level("run", path, tested=False))
    assert not result.passed and result.got == "allow" and result.by == "writes"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('mod = "shadow"\n', "mod: unknown key"),
        ('mode = "loud"\n', "mode: Input should be 'enforce' or 'shadow'"),
        (_rule("x", "alow", "true"), "rule 1 (x): effect: Input should be"),
        (_rule("x", "allow", "call.tool =="), "rule 1 (x): when: not a CEL expression"),
        (_rule("x", "allow", "stat.unchanged"), "rule 1 (x): when: unknown name 'stat'"),
        (_rule("x", "allow", "true") + _rule("x", "deny", "true"), "rule id 'x' is used twice"),
        ('[[rule]]\nid = "x"\neffect = "allow"\n', "rule 1 (x): when: Field required"),
        ("[[rule\n", "not TOML"),
        (
            _rule("x", "deny", "true")
            + '[[test]]\ncall = { tool = "t" }\nstate = { unchanged = "no" }\nexpect = "deny"\n',
            "test 1: state.unchanged: Input should be a valid boolean",
        ),
        (
            _rule("x", "deny", "true")
            + '[[test]]\ncall = { tool = "t" }\nrun = { round = "2" }\nexpect = "deny"\n',
            "test 1: run.round: Input should be a valid integer",
        ),
        (
            _rule("x", "deny", "true")
            + '[[test]]\nname = "t"\ncall = { tool = "t" }\nexpect = "deny"\nexpect_rule = "y"\n',
            "test 1 (t): expect_rule 'y' names no rule of this file (its rules: x)",
        ),
    ],
)
def test_a_wrong_policy_file_is_refused_naming_the_problem(
    tmp_path: Path, text: str, said: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(PolicyError) as refused:
        load_policy(None, path)
    assert str(refused.value).startswith(f"{path}: ") and said in str(refused.value)


def test_missing_files_are_refused_and_absent_levels_are_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(PolicyError, match=r"--policy .*nope\.toml: no such file"):
        load_policy(None, tmp_path / "nope.toml")
    assert load_policy(tmp_path, None) is None  # an env folder without policy.toml
    monkeypatch.setenv("LOOPDECK_USER_POLICY", str(tmp_path / "mine.toml"))
    with pytest.raises(PolicyError, match="LOOPDECK_USER_POLICY"):
        load_policy(None, None)
    _file(tmp_path, _rule("u", "deny", "true"), "mine.toml")
    _file(tmp_path, _rule("e", "allow", "true"))
    policy = load_policy(tmp_path, None)
    assert policy is not None and [r.key for r in policy.rules] == ["user:u", "env:e"]


def test_a_shadow_level_says_what_it_would_decide_and_decides_nothing(tmp_path: Path) -> None:
    enforced = _file(tmp_path, _rule("src", "allow", 'call.args.path.startsWith("src/")'), "e.toml")
    shadow = _file(tmp_path, 'mode = "shadow"\n' + _rule("all", "deny", "true"), "s.toml")
    policy = Policy([read_level("env", enforced), read_level("run", shadow)])
    verdict = policy.evaluate(case_facts(_case()), CaseMemory(_case())).verdict()
    assert (verdict.effect, verdict.decided_by and verdict.decided_by.rule_id) == ("allow", "src")
    assert (verdict.would, verdict.would_by and verdict.would_by.rule_id) == ("deny", "all")


def test_a_runs_rules_count_their_uses_and_the_states_they_allowed_in(tmp_path: Path) -> None:
    path = _file(tmp_path, _rule("few", "allow", "rule.uses < 2 && !state.unchanged_since_rule"))
    gate = RunPolicy(Policy([read_level("run", path)]), "python")
    facts = case_facts(_case(state={"hash": "s1"}))
    first = gate.decide(facts, None)
    assert first.effect == "allow" and not gate.book.counted  # counted once the run takes it
    first.count()  # first use, state s1
    assert gate.decide(facts, None).effect == "none"  # s1 is where it last allowed
    moved = case_facts(_case(state={"hash": "s2"}))
    verdict = gate.decide(moved, None)
    assert verdict.effect == "allow" and verdict.facts["rules"]["run:few"]["uses"] == 1
    verdict.count()
    assert gate.decide(case_facts(_case(state={"hash": "s3"})), None).effect == "none"
    assert gate.book.counted == {"run:few": 2} and gate.book.allowed_in == {"run:few": "s2"}
    assert isinstance(gate.book, RuleBook)


def test_policy_leaves_the_limit() -> None:
    """Reading a policy leaves the interpreter's recursion limit as it was (CEL's parser
    raises it for the whole process when built); a condition nested too deep is refused."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from loopdeck.policy.expressions import Condition, ExpressionError\n"
        "before = sys.getrecursionlimit()\n"
        "assert Condition('(' * 12 + 'true' + ')' * 12).holds({})\n"
        "try:\n"
        "    Condition('(' * 5000 + 'true' + ')' * 5000)\n"
        "except ExpressionError as exc:\n"
        "    print(exc)\n"
        "print(before, sys.getrecursionlimit())\n"
    )
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    deep, limits = said.stdout.splitlines()
    assert "nested too deep" in deep
    assert limits.split()[0] == limits.split()[1]
