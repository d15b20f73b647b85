"""The operator's channels, as Apprise reaches them: each `--notify` URL checked as it is
given (a URL Apprise cannot read is refused naming it, its secrets left out), and a push sent
to all of them at once, bounded in time, what each did said by the channel's kind.

Apprise writes every service's protocol (ntfy, Slack, Discord, mail, a JSON webhook); loopdeck
writes none. A channel's URL may hold a token (Slack's, a mail password): it is never said,
only its kind (`ntfy`, `slack`, `json`) or Apprise's own redacted form.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SEND_BOUND_S = 15.0  # one push, every channel, retries included
WHY_CAP = 200

log = logging.getLogger("loopdeck.notify")


class BadChannel(ValueError):
    """A `--notify` URL Apprise cannot read: the message names it, redacted."""


@dataclass(frozen=True)
class Delivery:
    """What one push did: the kinds of the channels that took it, and each that did not,
    with why (`slack: A Connection error occurred posting to Slack.`)."""

    took: tuple[str, ...]
    failed: tuple[str, ...]

    @property
    def sent(self) -> bool:
        return bool(self.took)


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
            result = self._apprise.notify(
                body=body,
                title=title,
                body_format=apprise.NotifyFormat.TEXT,
                timeout=self.bound_s,
            )
        except Exception as exc:  # Apprise's own failure: every channel failed, said so
            log.warning("loopdeck notify: the push failed: %s", exc)
            return Delivery((), tuple(f"{kind}: {exc}"[:WHY_CAP] for kind in self.kinds))
        took: list[str] = []
        failed: list[str] = []
        for service in result:
            kind = self._kinds.get(str(service.url), str(service.name))
            if service:
                took.append(kind)
            else:
                failed.append(f"{kind}: {_why(service)}"[:WHY_CAP])
        for why in failed:
            log.warning("loopdeck notify: a push did not go: %s", why)
        return Delivery(tuple(took), tuple(failed))


def _why(service: Any) -> str:
    said = [str(entry.message) for entry in service.logs() if entry.message]
    return said[-1] if said else f"status {getattr(service, 'status', '?')}"


def _shown(service: Any) -> str:
    """A service's URL as Apprise says it with its secrets hidden."""
    return str(service.url(privacy=True))
