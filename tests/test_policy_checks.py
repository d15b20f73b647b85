"""What a policy refuses as it loads, and what it says when a rule cannot be evaluated: a
level's file that is no file (a folder, a link to nothing), CEL's own names read as CEL reads
them, a macro's variable only inside its macro, a constant that can never be a condition
(a bad pattern, a value that is no bool), and an argument too deep to be looked at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loopdeck.policy.cases import CaseMemory, case_facts
from loopdeck.policy.document import PolicyCase, PolicyError
from loopdeck.policy.engine import Policy
from loopdeck.policy.expressions import Condition, ConditionFailed, ExpressionError, cel_value
from loopdeck.policy.loading import load_policy, read_level


@pytest.fixture(autouse=True)
def _no_user_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPDECK_USER_POLICY", "none")


def _rule(rule_id: str, effect: str, when: str) -> str:
    return f"[[rule]]\nid = {rule_id!r}\neffect = {effect!r}\nwhen = '''{when}'''\n"


def _case(args: dict[str, Any]) -> PolicyCase:
    return PolicyCase.model_validate({"call": {"tool": "write_file", "args": args},
                                      "expect": "ask"})  # fmt: skip


def test_a_policy_toml_that_is_no_file_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = tmp_path / "env"
    (env / "policy.toml").mkdir(parents=True)
    with pytest.raises(PolicyError, match=r"env/policy\.toml \(the env folder's policy\): a"
                       " folder, not a file"):  # fmt: skip
        load_policy(env, None)
    (env / "policy.toml").rmdir()
    (env / "policy.toml").symlink_to(tmp_path / "gone.toml")
    with pytest.raises(PolicyError, match=r"a link to .*gone\.toml, which does not exist"):
        load_policy(env, None)
    # The user's, where the user's config is: the same.
    config = tmp_path / "config"
    (config / "loopdeck" / "policy.toml").mkdir(parents=True)
    monkeypatch.delenv("LOOPDECK_USER_POLICY")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    with pytest.raises(PolicyError, match=r"\(the user's policy\): a folder, not a file"):
        load_policy(None, None)
    (config / "loopdeck" / "policy.toml").rmdir()
    assert load_policy(None, None) is None  # nothing there: no user level
    with pytest.raises(PolicyError, match=r"--policy .*config: a folder, not a file"):
        load_policy(None, config)


@pytest.mark.parametrize(
    ("when", "args", "holds"),
    [
        ("type(call.args.path) == string", {"path": "a"}, True),
        ("type(call.args.n) == int || type(call.args.n) == uint", {"n": 1}, True),
        ("type(call.args.m) == map && type(call.args.l) == list", {"m": {}, "l": []}, True),
        ("type(call.args.b) == bool || type(call.args.z) == null_type", {"z": None, "b": 1},
         True),
        ("type(call.args.d) == double || type(call.args.d) == bytes", {"d": "x"}, False),
        ("call.args.map(k, [k].all(j, j == k)) == [true]", {"k": 1}, True),
    ],
)  # fmt: skip
def test_cels_type_names_and_macro_variables_are_read_as_cel_reads_them(
    when: str, args: dict[str, Any], holds: bool
) -> None:
    assert Condition(when).holds({"call": cel_value({"args": args})}) is holds


@pytest.mark.parametrize(
    ("when", "said"),
    [
        ("[1].exists(foo, foo > 0) && foo.bar", "unknown name 'foo'"),
        ('call.args.exists(k, k == "x") || k == 1', "unknown name 'k'"),
        ('call.args.path.matches("calc(")', "'calc(' is not a regular expression (RE2: missing )"),
        ('matches(call.args.path, "a" + "[")', "'a[' is not a regular expression"),
        ('"1"', "it reads no attribute and always fails: gives StringType 1, not a bool"),
        ("1", "gives IntType 1, not a bool"),
        ("1 / 0 == 1", "always fails: "),
        # A function CEL here does not have fails every ask: refused as it loads.
        (
            'call.args.path.lowerAscii() == "a"',
            "unknown function 'lowerAscii': a condition calls all, bool",
        ),
        ('substring(call.args.path, 1) == "a"', "unknown function 'substring'"),
        (
            'forbid(principal, action == Action::"write_file", resource);',
            "not a CEL expression:"
            " Unexpected token Token('COLON', ':') at line 1, column 35."
            " (a condition is CEL: Cedar's permit/forbid is not read)",
        ),
    ],
)
def test_a_condition_that_could_never_be_what_it_means_is_refused_as_it_loads(
    when: str, said: str
) -> None:
    with pytest.raises(ExpressionError) as refused:
        Condition(when)
    assert said in str(refused.value)


def test_a_pattern_refused_as_a_call_is_decided_says_why_and_nothing_on_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    condition = Condition("call.args.path.matches(call.args.pattern)")
    for _ in range(2):
        with pytest.raises(ConditionFailed, match=r"'calc\(' is not a regular expression"):
            condition.holds({"call": cel_value({"args": {"path": "a", "pattern": "calc("}})})
    assert condition.holds({"call": cel_value({"args": {"path": "src/a", "pattern": "^src/"}})})
    assert capfd.readouterr().err == ""


def test_an_argument_nested_too_deep_to_be_evaluated_never_lets_a_call_through(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(_rule("no-x", "deny", 'call.tool == "x"') + _rule("all", "allow", "true"))
    policy = Policy([read_level("run", path)])
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(600):
        inner["a"] = {}
        inner = inner["a"]
    case = _case({"a": 1})
    facts = case_facts(case)
    facts["call"]["args"] = deep
    verdict = policy.evaluate(facts, CaseMemory(case)).verdict()
    assert verdict.effect == "ask" and verdict.decided_by is not None
    assert verdict.decided_by.rule_id == "no-x"
    too_deep = "the call's arguments are nested too deep to be evaluated"
    assert verdict.errors == (f"run:no-x: {too_deep}", f"run:all: {too_deep}")
    assert too_deep in verdict.decided_by.why


NESTED = "call.args.l.all(a, call.args.l.all(b, call.args.l.all(c, a + b + c >= 0)))"


def test_a_condition_that_runs_too_long_fails_closed_naming_why(tmp_path: Path) -> None:
    """Nested macros over a list the agent sends (100 items: a million evaluations) are not
    evaluated to their end on an ask: the allow does not hold, the deny asks, both named."""
    path = tmp_path / "policy.toml"
    path.write_text(_rule("deny-odd", "deny", f"!({NESTED})") + _rule("allow", "allow", NESTED))
    policy = Policy([read_level("run", path)])
    case = _case({"l": list(range(100))})
    verdict = policy.evaluate(case_facts(case), CaseMemory(case)).verdict()
    assert verdict.effect == "ask" and verdict.decided_by is not None
    assert verdict.decided_by.rule_id == "deny-odd"
    too_long = "not evaluated past 50,000 steps (nested macros, or a list too long for them)"
    assert [error.split(": ", 1) for error in verdict.errors] == [
        ["run:deny-odd", f"{too_long}: write it to do less"],
        ["run:allow", f"{too_long}: write it to do less"],
    ]
    short = _case({"l": [1, 2, 3]})  # the same rules on a short list: evaluated as written
    assert policy.evaluate(case_facts(short), CaseMemory(short)).effect == "allow"


def test_a_failed_test_names_the_rule_that_could_not_be_evaluated(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from loopdeck.cli import main

    path = tmp_path / "policy.toml"
    path.write_text(_rule("allow", "allow", NESTED) + '[[test]]\ncall = { tool = "t", args ='
                    ' { l = [' + ", ".join(["1"] * 60) + '] } }\nexpect = "allow"\n')  # fmt: skip
    assert main(["policy", "test", str(path)]) == 1
    assert (
        "test 1: expected allow, got ask (no rule decides) (rule allow's condition could not be"
        " evaluated: not evaluated past 50,000 steps" in capsys.readouterr().err
    )


POLICY_TEST_REFUSALS = [
    pytest.param('[[test]]\nname = "t1"\ncall = { tool = "t" }\nstate = { unchanged = "no" }'
                 '\nexpect = "ask"\n', 2, 'test 1 (t1): state.unchanged: Input should be a valid'
                 ' boolean', id="unchanged-a-string"),
    pytest.param(_rule("y", "deny", '"1"'), 2, "rule 2 (y): when: it reads no attribute and"
                 " always fails: gives StringType 1, not a bool", id="constant-no-bool"),
    pytest.param('[[test]]\nname = "t1"\ncall = { tool = "t" }\nexpect = "ask"\n'
                 'expect_rule = "nope"\n', 2, "test 1 (t1): expect_rule 'nope' names no rule of"
                 " this file (its rules: x)", id="expect-rule-names-no-rule"),
    # A condition that gives no bool on a test's call: the test fails naming it, even where
    # what the file decides is what the test expects (the broken deny asks).
    pytest.param(_rule("y", "deny", "call.args.n") + '[[test]]\nname = "t1"\ncall = { tool ='
                 ' "t", args = { n = 1 } }\nexpect = "ask"\n', 1, "test 1 (t1): rule y's"
                 " condition gives IntType 1, not a bool", id="condition-no-bool"),
]  # fmt: skip


@pytest.mark.parametrize(("added", "code", "said"), POLICY_TEST_REFUSALS)
def test_policy_test_refuses_a_wrong_test_or_rule_naming_the_file_and_the_test(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, added: str, code: int, said: str
) -> None:
    from loopdeck.cli import main

    path = tmp_path / "policy.toml"
    path.write_text(_rule("x", "allow", 'call.tool == "w"') + added, encoding="utf-8")
    assert main(["policy", "test", str(path)]) == code
    out, err = capsys.readouterr()
    assert f"loopdeck: {path}: {said}" in err, (out, err)


LONG = "call.args.l.all(a, a >= 0)"  # over 15,000 items: past the bound, quick without it


@pytest.mark.parametrize("recorded_past", [False, True])
def test_a_rebuilt_run_evaluates_its_conditions_as_recorded_not_bound_by_steps_since(
    tmp_path: Path, recorded_past: bool
) -> None:
    """A run recorded before the step bound allowed on a condition past it: rebuilt from its
    log, it allows again (the bound is for live decisions); one recorded failing past the
    bound fails again. Live, past the rebuild, the bound holds."""
    from loopdeck.core.events import PolicyDecided
    from loopdeck.policy.gate import RunPolicy

    path = tmp_path / "policy.toml"
    path.write_text(_rule("long", "allow", LONG))
    case = _case({"l": list(range(15_000))})
    facts = case_facts(case)
    live = RunPolicy(Policy([read_level("run", path)]), "python")
    assert live.decide(facts, None).effect == "none"  # live: bound, fails closed
    errors = ["run:long: not evaluated past 50,000 steps"] if recorded_past else []
    decided = PolicyDecided(run_id="r1", seq=3, call_id=facts["call"]["id"],
                            effect="none" if recorded_past else "allow", would="allow",
                            errors=errors, facts=facts)  # fmt: skip
    gate = RunPolicy(Policy([read_level("run", path)]), "python")
    went_live = gate.rebuilding([decided])
    assert gate.decide(facts, None).effect == ("none" if recorded_past else "allow")
    went_live()
    assert gate.decide(facts, None).effect == "none"


def test_a_rebuilt_ask_its_log_never_decided_is_bound_by_steps(tmp_path: Path) -> None:
    """A rebuild evaluates a condition whole only where its log says the run did: an ask
    its log has no decision of (its run left before deciding it) is decided as a live run
    decides it, past the bound failing closed."""
    from loopdeck.core.events import PolicyDecided
    from loopdeck.policy.gate import RunPolicy

    path = tmp_path / "policy.toml"
    path.write_text(_rule("long", "allow", LONG))
    facts = case_facts(_case({"l": list(range(15_000))}))
    other = PolicyDecided(run_id="r1", seq=3, call_id="c-other", effect="allow",
                          would="allow", facts=facts)  # fmt: skip
    gate = RunPolicy(Policy([read_level("run", path)]), "python")
    gate.rebuilding([other])
    verdict = gate.decide(facts, None)
    assert verdict.effect == "none", verdict
    assert ["run:long: not evaluated past 50,000 steps" in e for e in verdict.errors] == [True]
