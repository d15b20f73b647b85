"""The keys line at the bottom of every screen: one widget, redrawn only when its text changes.

Textual's Footer recomposes a widget per key whenever the bindings change, which they do on
every focus change; each new key also registers a watcher that is looked up linearly. Under a
runaway that made one `tab` cost tens of milliseconds, growing with the session. This line is
one Static: the same keys, descriptions and clicks, built from the screen's active bindings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static

KEY_STYLE = "bold $footer-key-foreground"
DESCRIPTION_STYLE = "$footer-description-foreground"
OFF_STYLE = "$footer-foreground 50%"
# A narrow line's words, by binding id: still words, never bare letters. A key not named here
# shortens to its description's first word.
SHORT = {
    "run.approvals": "wait",
    "run.transcript": "log",
    "run.message": "msg",
    "run.fork": "fork",
    "run.back": "fleet",
    "run.stop": "stop",
    "run.kill": "kill",
    "run.pause": "pause",
    "app.quit_run": "quit",
    "app.inbox": "inbox",
    "app.typed_quit": "quit",
    "inbox.approve": "approve",
    "inbox.edit": "edit",
    "inbox.tell": "tell",
    "inbox.grant": "grant",
    "inbox.reject": "reject",
    "inbox.message": "msg",
    "inbox.close": "back",
}

# Keys the screen names elsewhere, in the order they give way on a line too narrow for every
# key: `G` (the Calls panel's border says `· G` while a grant can be revoked), then `w` (the
# header's badge says `· w` while anything waits).
SAID_ELSEWHERE = ("run.revoke", "run.approvals")

Key = tuple[str, str, bool]  # the key, its description, whether it is enabled now


class KeysBar(Static):
    """The screen's shown bindings, `key description` each, the command palette's on the right."""

    DEFAULT_CSS: ClassVar[str] = """
    KeysBar {
        dock: bottom;
        height: 1;
        background: $footer-background;
        color: $footer-foreground;
    }
    """

    def __init__(self) -> None:
        super().__init__("", markup=False)
        self.key_spans: list[tuple[int, int, str]] = []  # x from, x to, the key to press
        self._shown: tuple[Key, ...] = ()
        self._keys_shown: dict[str, Binding] = {}
        self._under: list[Screen[object]] = []  # the screens under a dialog's line

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        # Over a dialog, the app's keys come and go with the run under it (`_active`).
        self._under = [s for s in self.app.screen_stack if s is not self.screen]
        for under in self._under if self.screen.is_modal else ():
            under.bindings_updated_signal.subscribe(self, lambda _: self._bindings_changed())
        self._bindings_changed(self.screen)

    def on_unmount(self) -> None:
        for screen in (self.screen, *self._under):
            screen.bindings_updated_signal.unsubscribe(self)

    def on_resize(self) -> None:
        self._shown = ()  # the palette key sits at the right edge: draw again
        self._bindings_changed(self.screen)

    def _bindings_changed(self, screen: Screen[object] | None = None) -> None:
        if not self.is_attached or screen not in (None, self.screen):
            return
        keys: list[Key] = []
        actions: set[str] = set()
        palette: Key | None = None
        self._keys_shown = {}
        for key, binding, enabled in self._active():
            if key in self._keys_shown:
                continue
            if key == self.app.COMMAND_PALETTE_BINDING and self.app.ENABLE_COMMAND_PALETTE:
                palette = (key, binding.description, enabled)
            elif binding.show and binding.action not in actions:
                actions.add(binding.action)  # several keys for one action: the first shows
                keys.append((key, binding.description, enabled))
            else:
                continue
            self._keys_shown[key] = binding
        shown = tuple(keys) + ((palette,) if palette else ())
        if shown != self._shown:
            self._shown = shown
            self._draw(keys, palette)

    def _active(self) -> Iterator[tuple[str, Binding, bool]]:
        """The screen's active bindings; over a dialog also the app's priority keys (stop,
        kill, pause, quit, the palette), which act there though Textual's active bindings
        stop at the dialog: the line shows the dialog's keys and those, never the keys of the
        screen under it."""
        for key, (_, binding, enabled, _) in self.screen.active_bindings.items():
            yield key, binding, enabled
        if self.screen.is_modal:
            app = self.app
            for key, binding in app._bindings:  # the app's own, as Textual keeps them
                if binding.priority and app.check_action(binding.action, ()):
                    yield key, binding, True

    def _fitted(self, keys: list[Key], palette: Key | None) -> tuple[list[Key], Key | None, int]:
        """Every key stays on a narrow line: the descriptions shorten to a word (`SHORT`),
        then the palette's key goes, then the keys close up to one space apart, then the keys
        the screen names elsewhere give way (`SAID_ELSEWHERE`). A screen with more keys than
        even that holds shows those that fit, then the palette's key as "more": its `keys`
        lists them all. Never a key cut at the edge, never a bare letter. The third value: the
        spaces between two keys."""
        room = self.size.width or self.app.size.width or 10_000  # not laid out: the screen's

        def width(shown: list[Key], tail: Key | None, gap: int = 2) -> int:
            keys_width = sum(len(self._display(k)) + len(d) + gap + 1 for k, d, _ in shown)
            tail_width = len(self._display(tail[0])) + len(tail[1]) + 4 if tail else 0
            return keys_width + (2 - gap if shown else 0) + tail_width

        short = [(k, self._short(k, d), e) for k, d, e in keys]
        stages = ((keys, palette, 2), (short, palette, 2), (short, None, 2), (short, None, 1))
        for shown, tail, gap in stages:
            if width(shown, tail, gap) <= room:
                return shown, tail, gap
        for said_elsewhere in SAID_ELSEWHERE:
            short = [k for k in short if self._keys_shown[k[0]].id != said_elsewhere]
            if width(short, None, 1) <= room:
                return short, None, 1
        more = (palette[0], "more", True) if palette else None
        while short and width(short, more, 1) > room:
            short.pop()
        return short, more, 1

    def _short(self, key: str, description: str) -> str:
        binding = self._keys_shown[key]
        if binding.id in SHORT:
            return SHORT[binding.id]
        return description.split()[0].rstrip("…:").lower() if description else description

    def _display(self, key: str) -> str:
        return self.app.get_key_display(self._keys_shown[key])

    def _draw(self, keys: list[Key], palette: Key | None) -> None:
        parts: list[tuple[str, str]] = []
        spans: list[tuple[int, int, str]] = []
        x = 0
        keys, palette, gap = self._fitted(keys, palette)
        for key, description, enabled in keys:
            display = self.app.get_key_display(self._keys_shown[key])
            label = f"{' ' if gap == 2 or not x else ''}{display} "
            parts += [(label, KEY_STYLE if enabled else OFF_STYLE)]
            parts += [(f"{description} ", DESCRIPTION_STYLE if enabled else OFF_STYLE)]
            width = len(label) + len(description) + 1
            spans.append((x, x + width, key))
            x += width
        if palette is not None:
            key, description, _ = palette
            tail = f" {self.app.get_key_display(self._keys_shown[key])} {description} "
            gap = max(1, self.size.width - x - len(tail))
            parts += [(" " * gap, ""), (tail, KEY_STYLE)]
            spans.append((x + gap, x + gap + len(tail), key))
        self.key_spans = spans
        self.update(Content.assemble(*parts))

    def on_click(self, event: events.Click) -> None:
        for start, end, key in self.key_spans:
            if start <= event.x < end:
                self.app.simulate_key(key)
                return
