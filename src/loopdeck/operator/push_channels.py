"""The operator's channels, as Apprise reaches them: each `--notify` URL checked as it is
given (a URL Apprise cannot read is refused naming it, its secrets left out), and a push sent
to all of them at once, bounded in time, what each did said by the channel's kind.

Apprise writes every service's protocol (ntfy, Slack, Discord, mail, a JSON webhook); loopdeck
writes none. A channel's URL may hold a token (Slack's, a mail password): it is never said,
only its kind (`ntfy`, `slack`, `json`) or Apprise's own redacted form.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SEND_BOUND_S = 15.0  # one push, every channel, retries included
WHY_CAP = 200
UNCONFIRMED = "sent, never confirmed"  # a push its receiver took and never answered
APPRISE_LOG = "apprise"

log = logging.getLogger("loopdeck.notify")


class BadChannel(ValueError):
    """A `--notify` URL Apprise cannot read: the message names it, redacted."""


@dataclass(frozen=True)
class Delivery:
    """What one push did: the kinds of the channels that took it, and each that did not,
    with why (`slack: A Connection error occurred posting to Slack.`). A channel whose
    receiver took the push and never answered (`unconfirmed`) is said among `failed` too
    (`json: sent, never confirmed …`): the push may have arrived, so it is not tried again."""

    took: tuple[str, ...]
    failed: tuple[str, ...]
    unconfirmed: tuple[str, ...] = ()

    @property
    def sent(self) -> bool:
        """A channel took it, or may have (sent, never confirmed): not pushed again."""
        return bool(self.took or self.unconfirmed)


def kind_of_url(url: str) -> str:
    """A channel's kind, from its URL's scheme: `ntfy`, `slack`, `json`, `mailto`."""
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else "?"


def redacted(url: str) -> str:
    """A URL as it may be said: its kind and host, nothing after."""
    scheme, sep, rest = url.partition("://")
    host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
    return f"{scheme}://{host}/…" if sep else "(not a URL)"


class Channels:
    """The channels a run pushes to; each URL checked by Apprise when made (`BadChannel`)."""

    def __init__(self, urls: Sequence[str], *, bound_s: float = SEND_BOUND_S) -> None:
        import apprise

        self.bound_s = bound_s
        self.kinds = tuple(kind_of_url(url) for url in urls)
        self._apprise = apprise.Apprise()
        for url in urls:
            if apprise.Apprise.instantiate(url) is None or not self._apprise.add(url):
                raise BadChannel(
                    f"--notify {redacted(url)}: not a URL Apprise can send to (ntfy://, "
                    "slack://, discord://, mailto://, json://HOST:PORT/PATH, …)"
                )
        # A service's result names it by its redacted URL: its kind found by that.
        services = zip(self._apprise, self.kinds, strict=True)
        self._kinds = {_shown(service): kind for service, kind in services}

    def shown(self) -> list[str]:
        """Each channel as Apprise says it with its secrets hidden."""
        return [_shown(service) for service in self._apprise]

    def send(self, title: str, body: str) -> Delivery:
        """The push to every channel at once, within `bound_s` in all."""
        import apprise

        try:
            with _SOCKET_DETAILS:
                result = self._apprise.notify(
                    body=body,
                    title=title,
                    body_format=apprise.NotifyFormat.TEXT,
                    timeout=self.bound_s,
                    log_level=logging.DEBUG,  # its socket's words: a read that timed out
                )
        except Exception as exc:  # Apprise's own failure: every channel failed, said so
            log.warning("loopdeck notify: the push failed: %s", exc)
            return Delivery((), tuple(f"{kind}: {exc}"[:WHY_CAP] for kind in self.kinds))
        took: list[str] = []
        failed: list[str] = []
        unconfirmed: list[str] = []
        for service in result:
            kind = self._kinds.get(str(service.url), str(service.name))
            if service:
                took.append(kind)
            elif hung := self._unanswered(service):
                unconfirmed.append(kind)
                said = f"{kind}: {UNCONFIRMED} ({hung}); not tried again, it may have arrived"
                failed.append(said[:WHY_CAP])
                log.warning("loopdeck notify: a push was never confirmed: %s", said)
            else:
                failed.append(f"{kind}: {_why(service)}"[:WHY_CAP])
                log.warning("loopdeck notify: a push did not go: %s", failed[-1])
        return Delivery(tuple(took), tuple(failed), tuple(unconfirmed))

    def _unanswered(self, service: Any) -> str:
        """Why a channel's push went out and was never answered ("" when it was refused or
        never left): its receiver took the request and did not answer in time, or the
        push's bound ran out while it was going."""
        from apprise.result import AppriseResultStatus

        if getattr(service, "status", None) == AppriseResultStatus.TIMEOUT:
            return f"still going when the push's {self.bound_s:.0f} s bound ran out"
        said = " ".join(str(entry.message) for entry in service.logs())
        if "Read timed out" in said:
            return "the receiver took it and did not answer in time"
        return ""


class _SocketDetails:
    """Apprise says why a request failed (a read that timed out: the request went, its
    answer never came) only at DEBUG: its logger is lowered to DEBUG while pushes go (as
    Apprise's own `LogCapture` does), and kept from the process's own log (those lines
    carry the push's payload); Apprise's warnings are said by loopdeck's own (`send`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.going = 0
        self.kept: tuple[int, bool] = (logging.NOTSET, True)

    def __enter__(self) -> None:
        with self.lock:
            if not self.going:
                apprise_log = logging.getLogger(APPRISE_LOG)
                self.kept = (apprise_log.level, apprise_log.propagate)
                apprise_log.setLevel(logging.DEBUG)
                apprise_log.propagate = False
            self.going += 1

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.going -= 1
            if not self.going:
                apprise_log = logging.getLogger(APPRISE_LOG)
                apprise_log.setLevel(self.kept[0])
                apprise_log.propagate = self.kept[1]


_SOCKET_DETAILS = _SocketDetails()


def _why(service: Any) -> str:
    said = [str(entry.message) for entry in service.logs() if entry.message]
    return said[-1] if said else f"status {getattr(service, 'status', '?')}"


def _shown(service: Any) -> str:
    """A service's URL as Apprise says it with its secrets hidden."""
    return str(service.url(privacy=True))
