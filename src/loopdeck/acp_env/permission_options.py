"""The options an agent offers with its permission request, and the one loopdeck answers with:
its allow-once option when the operator approves, its reject option when not; never
allow-always (later calls would go through unasked), so an agent that offers no allow-once is
refused by loopdeck, saying what it offered."""

from __future__ import annotations

from typing import Any


def option(options: list[Any], *kinds: str) -> Any:
    """The first option of the first of `kinds` the agent offers; None if it offers none."""
    for kind in kinds:
        for offered in options:
            if offered.kind == kind:
                return offered
    return None


def no_allow_once(options: list[Any]) -> str:
    """Why loopdeck refuses a permission that offers no allow-once option."""
    offered = ", ".join(sorted({str(option.kind) for option in options})) or "none"
    return (
        f"the agent offered no allow-once option (offered: {offered}); loopdeck never answers"
        " allow-always"
    )
