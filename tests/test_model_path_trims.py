"""The hot path's shortcuts say what the long way says (issue 43): a tool's result measured
for the cap from the text it was read back from, as `json_text` of the data would measure it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopdeck.core.dispatcher import _capped, _jsonable
from loopdeck.core.text import json_text

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(),  # any code point: non-ASCII, lone surrogates, backslashes, `\u` itself
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6) | st.integers(), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(value=json_values, cap=st.integers(min_value=0, max_value=200))
def test_a_result_is_capped_as_its_json_text_says(value: Any, cap: int) -> None:
    data, text = _jsonable(value)
    if text is not None:
        assert text == json_text(data)
    assert _capped(data, cap, text) == _capped(data, cap)


def test_text_with_escapes_is_measured_anew() -> None:
    for value in ("café", "\ud800", "a\\u0041", {"ключ": 1}):
        data, text = _jsonable(value)
        assert text is None
        assert _capped(data, 3) == _capped(data, 3, None)
