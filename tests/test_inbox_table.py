"""The inbox's columns at every width: never wider than the list (it never scrolls sideways),
the expiry and the run whole, the rest giving way in the stated order."""

from __future__ import annotations

from loopdeck.tui.inbox_table import PAD, WHAT_ROOM, layout

ROWS = [
    {"expires": "4:59", "run": "0022a4e57a64", "env/script": "order_support/wrong-guess",
     "call": "call_8f2KQp1xZr7TnV0aYbW3cD4e", "tool": "update_delivery_address",
     "what": "3. Update the delivery address to '7 New Street, Springfield'."},
    {"expires": "question", "run": "b1b47b3167ed", "env/script": "service_outage/ask",
     "call": "q1", "tool": "ask_user", "what": "Which order should I change?"},
]  # fmt: skip


def _widths(width: int) -> dict[str, int]:
    return dict(layout(ROWS, width).widths)


def test_the_columns_never_need_more_than_the_list_has() -> None:
    for width in range(60, 241):
        widths = _widths(width)
        assert sum(widths.values()) + PAD * len(widths) <= width, (width, widths)
        assert widths["expires"] == len("question") and widths["run"] == 12, widths


def test_what_gives_way_env_first_then_tool_and_call_cut_to_their_floors() -> None:
    wide = _widths(240)
    assert wide["env/script"] == len(ROWS[0]["env/script"]) and wide["what"] == len(ROWS[0]["what"])
    at_80 = _widths(80)
    assert "env/script" not in at_80 and at_80["what"] >= WHAT_ROOM, at_80
    assert at_80["tool"] < len("update_delivery_address") and at_80["call"] < 28, at_80
    narrow = _widths(60)
    assert narrow["tool"] == 12 and narrow["call"] == 8, narrow
    assert list(at_80) == ["expires", "run", "call", "tool", "what"]


def test_a_cell_cut_ends_in_an_ellipsis() -> None:
    shape = layout(ROWS, 80)
    cells = [text.plain for text in shape.cells(ROWS[0])]
    assert cells[:2] == ["4:59", "0022a4e57a64"]
    assert all(cell.endswith("…") for cell in cells[2:]), cells
