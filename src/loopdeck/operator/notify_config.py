"""Where a run's pushes go and when (`--notify`): the channels (Apprise URLs), how long a
decision waits before it is pushed, and whether a push may carry the run's content.

Each setting comes from the first place that says it: the command's flags, the environment
(`LOOPDECK_NOTIFY`: URLs separated by spaces; `LOOPDECK_NOTIFY_AFTER`; `LOOPDECK_NOTIFY_CONTENT`
= 1), then loopdeck's config file (`<user config>/loopdeck/config.toml`, or the file
`LOOPDECK_CONFIG` names, `none` for no file):

    notify = ["ntfy://ntfy.example.org/my-decisions", "json://localhost:9000/hook"]
    notify_after = 30
    notify_content = false

Light: no channel's library is imported here (`operator/push_channels.py` checks the URLs).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platformdirs import user_config_path

from loopdeck import settings
from loopdeck.settings import Settings

NOTIFY_VAR = "LOOPDECK_NOTIFY"
AFTER_VAR = "LOOPDECK_NOTIFY_AFTER"
CONTENT_VAR = "LOOPDECK_NOTIFY_CONTENT"
CONFIG_FILE = "config.toml"
DEFAULT_AFTER_S = 30.0
CONFIG_KEYS = ("notify", "notify_after", "notify_content")
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("", "0", "false", "no", "off")


class NotifyConfigError(ValueError):
    """A setting that cannot be read: the message names the flag, variable or file."""


@dataclass(frozen=True)
class NotifySettings:
    """The channels a run's decisions are pushed to (none: nothing is pushed), how long a
    decision waits before its push, and whether arguments and model text go in it."""

    urls: tuple[str, ...] = ()
    after_s: float = DEFAULT_AFTER_S
    content: bool = False

    @property
    def on(self) -> bool:
        return bool(self.urls)

    def environment(self) -> dict[str, str]:
        """These settings as the variables a child process reads them from (`serve`'s tabs):
        the URLs never go on a command line others can read (`ps`)."""
        if not self.on:
            return {}
        return {
            NOTIFY_VAR: " ".join(self.urls),
            AFTER_VAR: f"{self.after_s:g}",
            CONTENT_VAR: "1" if self.content else "0",
        }


def _settings(environ: Mapping[str, str] | None) -> Settings:
    """This process's settings, or those another environment says (a test's, a child's)."""
    return settings.current() if environ is None else Settings.read(environ)


def config_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """loopdeck's config file, when there is one to read."""
    named = _settings(environ).config
    if named is not None:
        return None if named == settings.NO_FILE else named
    path = user_config_path("loopdeck") / CONFIG_FILE
    return path if path.is_file() else None


def read_config(path: Path | None) -> dict[str, Any]:
    """The config file's notification keys (an unknown key, or one of the wrong type, refused
    naming the file); {} without a file."""
    if path is None:
        return {}
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise NotifyConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise NotifyConfigError(f"{path}: not TOML: {exc}") from None
    unknown = sorted(set(table) - set(CONFIG_KEYS))
    if unknown:
        raise NotifyConfigError(
            f"{path}: unknown key {unknown[0]!r} (loopdeck's config takes {', '.join(CONFIG_KEYS)})"
        )
    urls = table.get("notify", [])
    if not isinstance(urls, list) or not all(isinstance(u, str) and u.strip() for u in urls):
        raise NotifyConfigError(f'{path}: notify must be a list of URLs (notify = ["ntfy://…"])')
    if "notify_after" in table:
        table["notify_after"] = after_seconds(str(table["notify_after"]), f"{path}: notify_after")
    if not isinstance(table.get("notify_content", False), bool):
        raise NotifyConfigError(f"{path}: notify_content must be true or false")
    return table


def after_seconds(text: str, where: str) -> float:
    """A wait in seconds: a finite number, 0 or more (0: pushed at once)."""
    try:
        value = float(text)
    except ValueError:
        raise NotifyConfigError(f"{where} must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise NotifyConfigError(f"{where} must be 0 or more seconds, got {text!r}")
    return value


def _flag(value: str | None, name: str) -> bool | None:
    if value is None:
        return None
    word = value.strip().lower()
    if word not in TRUE_WORDS + FALSE_WORDS:
        raise NotifyConfigError(f"{name} must be 1 or 0, got {value!r}")
    return word in TRUE_WORDS


def resolved(
    urls: Sequence[str] = (),
    after_s: float | None = None,
    content: bool = False,
    environ: Mapping[str, str] | None = None,
) -> NotifySettings:
    """The settings from the flags given (`urls`, `after_s`, `content`), else the
    environment's, else the config file's."""
    said_here = _settings(environ)
    config = read_config(config_path(environ))
    chosen = [u.strip() for u in urls if u.strip()]
    if not chosen:
        chosen = list(said_here.notify) or list(config.get("notify", []))
    if after_s is None and said_here.notify_after is not None:
        after_s = after_seconds(said_here.notify_after, AFTER_VAR)
    if after_s is None:
        after_s = float(config.get("notify_after", DEFAULT_AFTER_S))
    said = _flag(said_here.notify_content, CONTENT_VAR)
    wanted = content or (said if said is not None else bool(config.get("notify_content")))
    return NotifySettings(tuple(dict.fromkeys(chosen)), after_s, wanted)
