"""What the view keeps of a long run: its newest call rows, never more than its bound."""

from loopdeck.core.events import CallProposed
from loopdeck.operator.runview import RunView


def test_the_view_keeps_only_its_newest_call_rows() -> None:
    view = RunView(max_call_rows=10)
    for n in range(35):
        view.apply(
            CallProposed(
                run_id="r1", seq=n + 1, call_id=f"c{n}", round=1, tool="poll", args={"n": n},
                risk="read", fingerprint=f"f{n}", state_hash="s",
            )
        )  # fmt: skip
    assert len(view.calls) == 10
    assert list(view.calls) == [f"c{n}" for n in range(25, 35)]
    assert view.calls_seen == 35 and view.calls_dropped == 25
