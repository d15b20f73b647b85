"""Every required script reaches its outcome through the CLI with --json."""

from collections import Counter

import pytest
from conftest import SAMPLES


def _executed(payload, tool):
    return sum(1 for c in payload["calls"] if c["tool"] == tool and c["status"] == "executed")


def test_service_outage_solve_meets_the_goal(cli) -> None:
    code, out, _ = cli(
        "run", str(SAMPLES / "service_outage"), "--script", "solve", "--headless", "--json"
    )
    assert code == 0
    assert out["stop_reason"] == "goal_met" and out["state"] == "complete"
    required = {"run_id", "env", "script", "model", "stop_reason", "state", "rounds"}
    required |= {"model_calls", "tool_calls", "tokens", "cost_usd", "findings", "calls"}
    assert required <= set(out)
    assert out["tokens"] > 0 and out["cost_usd"] > 0
    assert {"tool", "args", "fingerprint", "status"} <= set(out["calls"][0])


def test_service_outage_loop_restarts_exactly_once(cli) -> None:
    code, out, _ = cli(
        "run", str(SAMPLES / "service_outage"), "--script", "loop", "--headless", "--json"
    )
    assert code == 1
    assert out["stop_reason"] in ("no_progress", "stalled")
    assert _executed(out, "restart_service") == 1
    assert Counter(c["status"] for c in out["calls"])["blocked_repeat"] == 1


def test_service_outage_loop_in_react_mode_is_no_progress(cli) -> None:
    code, out, _ = cli(
        "run", "service_outage", "--script", "loop", "--mode", "react", "--headless", "--json"
    )
    assert code == 1
    assert out["stop_reason"] == "no_progress"
    assert _executed(out, "restart_service") == 1


def test_service_outage_wrong_guess_stalls_after_two_rounds(cli) -> None:
    code, out, _ = cli(
        "run", str(SAMPLES / "service_outage"), "--script", "wrong-guess", "--headless", "--json"
    )
    assert code == 1
    assert out["stop_reason"] == "stalled"
    assert out["rounds"] == 2
    assert any("db_url" in finding for finding in out["findings"])


def test_service_outage_claimed_success_is_not_believed(cli) -> None:
    code, out, _ = cli(
        "run", "service_outage", "--script", "claims-success", "--headless", "--json"
    )
    assert out["stop_reason"] == "stalled" and code == 1


def test_order_support_solve_auto_and_deny(cli) -> None:
    env = str(SAMPLES / "order_support")
    code, out, _ = cli("run", env, "--script", "solve", "--approve", "auto", "--headless", "--json")
    assert code == 0 and out["stop_reason"] == "goal_met"
    code, out, _ = cli("run", env, "--script", "solve", "--approve", "deny", "--headless", "--json")
    assert code == 1 and out["stop_reason"] != "goal_met"
    update = [c for c in out["calls"] if c["tool"] == "update_delivery_address"]
    assert [c["status"] for c in update] == ["rejected"]


def test_order_support_double_write_stops_at_the_met_goal(cli) -> None:
    _code, out, _ = cli(
        "run",
        "order_support",
        "--script",
        "double-write",
        "--approve",
        "auto",
        "--headless",
        "--json",
    )
    statuses = [c["status"] for c in out["calls"] if c["tool"] == "update_delivery_address"]
    # the first update meets the goal, checked at once: the repeat is never proposed
    assert statuses == ["executed"]
    assert out["stop_reason"] == "goal_met"
    assert out["stop_reason"] == "goal_met"


def test_order_support_ask_and_handoff(cli) -> None:
    _, out, _ = cli("run", "order_support", "--script", "ask", "--headless", "--json")
    assert out["stop_reason"] == "ask_user"
    _, out, _ = cli("run", "order_support", "--script", "escalate", "--headless", "--json")
    assert out["stop_reason"] == "handoff"


# Several seconds of subprocesses: in `make stress` (CI runs both targets).
@pytest.mark.slow
def test_repo_triage_solve_and_runaway(cli) -> None:
    env = str(SAMPLES / "repo_triage")
    code, out, _ = cli("run", env, "--script", "solve", "--approve", "auto", "--headless", "--json")
    assert code == 0 and out["stop_reason"] == "goal_met"
    _, out, _ = cli("run", env, "--script", "runaway", "--headless", "--json")
    assert out["stop_reason"] in ("no_progress", "stalled")
    assert _executed(out, "run_pytest") == 1


@pytest.mark.slow
def test_sample_folders_never_change(cli) -> None:
    source = (SAMPLES / "repo_triage" / "workspace" / "calculator.py").read_text()
    cli("run", "repo_triage", "--script", "solve", "--headless", "--json")
    assert (SAMPLES / "repo_triage" / "workspace" / "calculator.py").read_text() == source
    assert "return a - b" in source.split("def add")[1].split("def")[0]


def test_envs_lists_samples_and_scripts(cli) -> None:
    code, out, _ = cli("envs", "--json")
    assert code == 0
    by_name = {e["env"]: e for e in out}
    assert {"service_outage", "order_support", "repo_triage"} <= set(by_name)
    assert {"solve", "loop", "wrong-guess"} <= set(by_name["service_outage"]["scripts"])
