"""An answer to a budget's pause (`core/budget_pause.py`) as the run reads it: `continue`,
`raise N` or `stop` (`continue` and `stop` alone: words after them are refused, never
dropped). The one reading: the run carries out what it returns and asks again with
its words otherwise, and every front end (`loopdeck answer`, the inbox, a link, the console's
dialog) checks an answer with it before recording it, so what is recorded is what the run
does. Light on purpose (no pydantic): the command line imports it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from loopdeck.caps import Cap
from loopdeck.core.text import capped, number

CHOICES = "answer `continue`, `raise N` (a new cap for this run) or `stop`"
CONTINUE = ("continue", "c", "go", "yes")
STOP = ("stop", "s")
RAISE = ("raise", "r")


@dataclass(frozen=True, slots=True)
class BudgetAnswer:
    """What the operator said to a budget's pause; `new_cap` is the raised cap."""

    choice: Literal["continue", "raise", "stop"]
    new_cap: float = 0.0


def takes_no_words(choice: str, instead: str = "") -> str:
    """Why a choice that takes no words is refused with some after it (`allow foo`): the run
    would carry out the bare choice and the words would be lost."""
    return f"`{choice}` takes no words: answer `{choice}` alone{instead}"


def read_answer(text: str, cap: Cap | None = None, used: float | None = None) -> BudgetAnswer | str:
    """The answer as the run carries it out, else why it cannot (words for the operator).
    `raise N` takes a finite N above what the cap has used (`used`; unknown: above 0), whole
    for a cap counted in whole numbers: the run sets the cap to it as it is."""
    words = text.split()
    first = words[0].lower() if words else ""
    if first in CONTINUE + STOP and len(words) > 1:
        return takes_no_words(first, ", or `raise N` for a new cap" if first in CONTINUE else "")
    if first in CONTINUE:
        return BudgetAnswer("continue")
    if first in STOP:
        return BudgetAnswer("stop")
    if first not in RAISE:
        said = repr(capped(text.strip(), 80)) if first else "an empty answer"
        return f"it takes `continue`, `raise N` or `stop`; {said} is none of them"
    if len(words) < 2:
        return f"`{first}` needs its N: answer `raise N` (one argument)"
    amount = " ".join(words[1:])
    shown = repr(capped(amount, 40))
    try:
        value = float(amount.replace(",", ""))
    except ValueError:
        return f"`raise N` needs a number, not {shown}"
    if not math.isfinite(value):
        return f"`raise N` needs a finite number, not {shown}"
    floor = used or 0.0
    if value <= floor:
        return f"the cap must be above {number(floor)}, not {number(value)}"
    if cap is not None and cap.whole and not value.is_integer():
        return f"the {cap.label} cap is a whole number, not {number(value)}"
    return BudgetAnswer("raise", value)
