"""`--notify URL`, `--notify-after SECONDS` and `--notify-content`: the flags of every command
that runs or serves runs (`run`, `acp`, `gateway`, `console`, `serve`), and the settings they
make with the environment's and the config file's (`operator/notify_config.py`).

Light: the parser imports it; the settings are read when a command runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loopdeck.operator.notify_config import NotifySettings


def seconds(text: str) -> float:
    from loopdeck.operator.notify_config import NotifyConfigError, after_seconds

    try:
        return after_seconds(text, "it")
    except NotifyConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("it ")) from None


def add_notify_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--notify",
        action="append",
        default=[],
        metavar="URL",
        help="push decisions that wait to this Apprise URL (ntfy://, slack://, discord://,"
        " mailto://, json://HOST:PORT/PATH); repeatable (default: LOOPDECK_NOTIFY, else"
        " `notify` in loopdeck's config.toml)",
    )
    parser.add_argument(
        "--notify-after",
        type=seconds,
        metavar="SECONDS",
        help="push a decision once it has waited this long (default: 30)",
    )
    parser.add_argument(
        "--notify-content",
        action="store_true",
        help="with --notify: the arguments, the model's words and a question's text in the push"
        " too (never a secret of loopdeck's environment)",
    )


def notify_settings(args: argparse.Namespace) -> NotifySettings:
    """The command's flags with the environment's and the config file's settings;
    `NotifyConfigError` (exit 2) names what cannot be read."""
    from loopdeck.operator.notify_config import resolved

    flagged = [url for url in getattr(args, "notify", None) or () if url.strip()]
    chosen = resolved(
        flagged, getattr(args, "notify_after", None), bool(getattr(args, "notify_content", False))
    )
    if chosen.on and not flagged:
        _check_unflagged(chosen.urls)
    return chosen


def _check_unflagged(urls: tuple[str, ...]) -> None:
    """URLs said by the environment or the config file, checked by Apprise now: one it cannot
    read is refused naming where it was said (the run would name `--notify`, not given)."""
    from loopdeck import settings
    from loopdeck.operator.notify_config import NOTIFY_VAR, NotifyConfigError, config_path
    from loopdeck.operator.push_channels import BadChannel, Channels

    try:
        Channels(urls)
    except BadChannel as exc:
        where = NOTIFY_VAR if settings.current().notify else f"{config_path()}: notify"
        raise NotifyConfigError(f"{where} {str(exc).removeprefix('--notify ')}") from None


def base_url(text: str) -> str:
    """`serve --url BASE`: an http(s) URL with a host, no query, and no path: the links are
    answered at the server's root (`/d/TOKEN`), so a link under a path would be dead."""
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    try:
        parts.port  # noqa: B018  (a port that is no number raises here)
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise argparse.ArgumentTypeError(
            f"must be the http:// or https:// address a phone reaches this server at"
            f" (e.g. https://box.tailnet.ts.net), got {text!r}"
        )
    if parts.path.strip("/") or parts.fragment:
        raise argparse.ArgumentTypeError(
            f"must be an address with no path, got {text!r}: this server answers decision"
            " links at its root (/d/TOKEN), so links under a path would all be refused. Behind"
            " a proxy, publish it at a host (or port) of its own whose root is forwarded to this"
            " server, e.g. https://loopdeck.example.net"
        )
    return text.rstrip("/")


def add_serve_notify_flags(parser: argparse.ArgumentParser) -> None:
    """`serve`'s: `--url BASE` (where its decision links point) and the notify flags, which
    each tab's console hands to the runs it starts."""
    parser.add_argument(
        "--url",
        type=base_url,
        metavar="BASE",
        help="answer one-time decision links at this address (the one a phone reaches, e.g."
        " behind your own VPN or tunnel); runs of this store on this machine push links to it",
    )
    add_notify_flags(parser)


def base_authority(url: str) -> tuple[str, int]:
    """BASE's host as `serve` compares a Host or Origin with it: lowercased, an address in
    its short form, and its port (its scheme's when not written)."""
    import contextlib
    import ipaddress
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    name = (parts.hostname or "").lower()
    with contextlib.suppress(ValueError):
        name = str(ipaddress.ip_address(name))
    return name, parts.port or (443 if parts.scheme == "https" else 80)
