"""`loopdeck` with one failure put in its console, for the tests of a console that cannot go
on: the approval dialog's countdown (a screen's timer) raises at its first tick, a second
after the dialog is shown. Textual cannot go on from a timer that raised.

    python tests/console_fault.py run ENV --script SCRIPT --db DB    (loopdeck's arguments)
"""

import sys

from loopdeck.cli import entry
from loopdeck.tui.dialogs import ApprovalDialog


class Injected(RuntimeError):
    """The failure the test puts in the console."""


_countdown = ApprovalDialog.tick_countdown


def _tick(self: ApprovalDialog) -> None:
    if self.is_mounted:  # the timer's tick, not the dialog's first drawing of its countdown
        raise Injected("the test's failure")
    _countdown(self)


ApprovalDialog.tick_countdown = _tick  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.argv = ["loopdeck", *sys.argv[1:]]
    entry()
