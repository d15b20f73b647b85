"""A store that stopped answering, as a reader tells the operator: since when, and why.

The fleet and an attached console keep one `Outage`: each read that raises StoreUnavailable
is `failed`, the first read that works is `recovered`; `text` is what the screen shows
("store unreachable since 21:04:10, retrying"; a refused login with the server's words: "the
store refuses loopdeck's login since 21:04:10 (password authentication failed for user
"loopdeck"), retrying"), empty while the store answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loopdeck.core.recording import outage_words
from loopdeck.store.base import StoreRefused, StoreUnavailable


@dataclass
class Outage:
    since: datetime | None = None
    cause: str = ""
    detail: str = ""  # the store's last message, for a log or a test
    why: str = ""  # a refused login's reason, in the server's words

    def failed(self, exc: StoreUnavailable) -> bool:
        """Note a read the store could not answer; True when this starts the outage."""
        started = self.since is None
        if started:
            self.since = datetime.now().astimezone()
        self.cause, self.detail = exc.cause, str(exc)
        self.why = exc.why if isinstance(exc, StoreRefused) else ""
        return started

    def recovered(self) -> bool:
        """The store answered; True when that ends an outage."""
        ended = self.since is not None
        self.since, self.cause, self.detail, self.why = None, "", "", ""
        return ended

    @property
    def text(self) -> str:
        if self.since is None:
            return ""
        why = f" ({self.why})" if self.why else ""
        return f"{outage_words(self.cause)} since {self.since:%H:%M:%S}{why}, retrying"
