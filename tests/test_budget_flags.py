"""Each budget flag produces its own stop reason."""

import pytest

FLAG_REASON = [
    (["--max-turns", "1"], "turn_limit"),
    (["--max-tool-calls", "1"], "tool_call_limit"),
    (["--max-tokens", "5"], "token_limit"),
    (["--max-cost", "0.0000001"], "cost_limit"),
]


@pytest.mark.parametrize(("flags", "reason"), FLAG_REASON)
def test_budget_flag_stops_service_outage_solve(cli, flags, reason) -> None:
    code, out, _ = cli("run", "service_outage", "--script", "solve", "--headless", "--json", *flags)
    assert code == 1
    assert out["stop_reason"] == reason
    assert out["state"] == "stopped"


def test_max_rounds_on_wrong_guess_is_round_limit(cli) -> None:
    code, out, _ = cli(
        "run",
        "service_outage",
        "--script",
        "wrong-guess",
        "--headless",
        "--json",
        "--max-rounds",
        "1",
    )
    assert code == 1
    assert out["stop_reason"] == "round_limit"
    assert out["rounds"] == 1


def test_max_tool_calls_counts_executed_calls_only_up_to_the_cap(cli) -> None:
    _, out, _ = cli(
        "run",
        "service_outage",
        "--script",
        "solve",
        "--headless",
        "--json",
        "--max-tool-calls",
        "2",
    )
    assert out["tool_calls"] == 2
