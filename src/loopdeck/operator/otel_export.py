"""A run as one OpenTelemetry trace sent over OTLP/HTTP: `loopdeck export RUN_ID --otlp URL`
after the fact (`export_run`), `loopdeck run … --otlp URL` live (`LiveTrace`, a bus
subscriber). The spans are `operator/otel_spans.py`'s; the SDK's exporter sends them, with
its `OTEL_EXPORTER_OTLP_*` variables (headers for a backend's auth, the timeout).

A send is bounded in all by the timeout (`bound_s`, default 10 s, retries included): each
goes on a daemon thread of its own and is waited for no longer, so a collector that is down,
hangs or trickles, or a name that never resolves, never holds the process's exit. What did
not go is said once, naming the URL and how many spans.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from loopdeck.core.events import Event
from loopdeck.operator.otel_spans import TraceBuilder
from loopdeck.operator.replay_link import load_events
from loopdeck.store import queries
from loopdeck.store.base import Store

BATCH = 512  # spans a request: far under a collector's usual 4 MiB for loopdeck's sizes
LIVE_SEND_S = 2.0  # a live run's ended spans are sent at most this often
TIMEOUT_S = 10.0  # the SDK's default bound on a send, retries included
TIMEOUT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
ERRNO_WORDS = re.compile(r"\[Errno -?\d+\] ([^'\"()]+)")


@dataclass(frozen=True)
class Sent:
    trace_id: str
    spans: int
    endpoint: str


class ExportFailed(Exception):
    """The trace was not sent: says where to and why."""


def traces_url(url: str) -> str:
    """The OTLP/HTTP traces endpoint: the URL as given, or a collector's bare address
    (`http://localhost:4318`) with the traces path, `/v1/traces`, put on."""
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        return urlunsplit(parts._replace(path="/v1/traces"))
    return url


def shown(url: str) -> str:
    """The URL as said on the terminal: a password in it replaced by `***`."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def bound_s() -> float:
    """How long a send may take in all, retries included: the SDK's timeout variables
    (seconds, the traces one first), else its default, 10; a value that is no positive
    number is the default, as the SDK takes it."""
    raw = next((value for name in TIMEOUT_VARIABLES if (value := os.environ.get(name))), "")
    try:
        seconds = float(raw)
    except ValueError:
        return TIMEOUT_S
    return seconds if 0 < seconds < math.inf else TIMEOUT_S


def not_sent(url: str, why: str, unsent: int, total: int) -> str:
    """The one line of a send that failed. With no answer, the last spans may have arrived:
    they are said unconfirmed, not lost."""
    lost = "not confirmed received" if why.startswith("no answer") else "not sent"
    return f"cannot send the trace to {shown(url)}: {why} ({unsent} of {total} spans {lost})"


class _Watched(requests.Session):
    """The exporter's HTTP session, keeping what last went wrong for the one message that
    names the URL: the system's words ("Connection refused") or the HTTP status; "" for a
    timeout, said as the bound that ran out."""

    said = ""

    def request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = super().request(*args, **kwargs)
        except requests.Timeout:
            self.said = ""
            raise
        except requests.RequestException as exc:
            found = ERRNO_WORDS.search(str(exc))
            self.said = found.group(1).strip() if found else str(exc)
            raise
        if response.status_code >= 300:
            self.said = f"HTTP {response.status_code} {response.reason or ''}".strip()
        return response


class _Quiet:
    """The SDK exporter's log lines (retries, failures) kept off the terminal while any
    send goes, on whichever thread: what failed is said once, naming the URL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sending = 0
        self._null = logging.NullHandler()
        self._propagate = True

    def __enter__(self) -> None:
        with self._lock:
            if self._sending == 0:
                logger = logging.getLogger("opentelemetry.exporter")
                self._propagate = logger.propagate
                logger.addHandler(self._null)
                logger.propagate = False
            self._sending += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._sending -= 1
            if self._sending == 0:
                logger = logging.getLogger("opentelemetry.exporter")
                logger.removeHandler(self._null)
                logger.propagate = self._propagate


_QUIET = _Quiet()


def _export(spans: Sequence[ReadableSpan], url: str, timeout_s: float) -> str | None:
    """One request's worth of spans to the endpoint, the SDK's retries within `timeout_s`
    (headers and the rest from its variables): None when taken, else why not ("" when no
    answer came in time)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    session = _Watched()
    exporter = OTLPSpanExporter(endpoint=url, session=session, timeout=timeout_s)
    try:
        if exporter.export(spans) is SpanExportResult.SUCCESS:
            return None
        return session.said
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]


class _Delivery:
    """Spans sent to the endpoint by a deadline (`time.monotonic()`), a batch a request, on
    the caller's thread (`run`) or a daemon thread of its own (`start`). Whoever waits for
    it waits no longer than the deadline (`wait`), and the process's exit never waits for
    it: a request still going then is the collector's to lose."""

    def __init__(self, spans: Sequence[ReadableSpan], url: str, bound: float) -> None:
        self.spans = list(spans)
        self.url = url
        self.bound = bound
        self.deadline = time.monotonic() + bound
        self.sent = 0
        self.failed: str | None = None  # why, once it failed
        self._ended = threading.Event()

    def start(self) -> _Delivery:
        threading.Thread(target=self.run, name="loopdeck-otlp", daemon=True).start()
        return self

    def run(self) -> None:
        try:
            with _QUIET:
                for start in range(0, len(self.spans), BATCH):
                    batch = self.spans[start : start + BATCH]
                    left = self.deadline - time.monotonic()
                    why = _export(batch, self.url, left) if left > 0 else ""
                    if why is not None:
                        self.failed = why or self.no_answer
                        return
                    self.sent += len(batch)
        except Exception as exc:  # the SDK refused its own settings: said like a failed send
            self.failed = f"{type(exc).__name__}: {exc}"
        finally:
            self._ended.set()

    @property
    def no_answer(self) -> str:
        return f"no answer within {self.bound:g} s"

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    @property
    def unsent(self) -> list[ReadableSpan]:
        """What has not gone (yet): all that is left once it failed, nothing once it ended
        well."""
        return [] if self.ended and self.failed is None else self.spans[self.sent :]

    def wait(self, until: float) -> int:
        """Waits until it ended or `until` (`time.monotonic()`): how many spans did not go."""
        self._ended.wait(max(until - time.monotonic(), 0.0))
        return len(self.unsent)

    def why(self) -> str:
        return self.failed or self.no_answer


def send(spans: Sequence[ReadableSpan], url: str, bound: float | None = None) -> None:
    """The spans to the OTLP/HTTP endpoint within `bound` seconds in all (`bound_s()` when
    None); `ExportFailed` naming the URL, why and how many spans did not go."""
    delivery = _Delivery(spans, url, bound or bound_s()).start()
    if unsent := delivery.wait(delivery.deadline):
        raise ExportFailed(not_sent(url, delivery.why(), unsent, len(spans)))


def _send_built(builder: TraceBuilder, url: str) -> Sent:
    spans = builder.finish()
    if not spans:
        raise ExportFailed("the run has no events: no trace to send")
    send(spans, url)
    return Sent(builder.trace_id, len(spans), shown(url))


async def export_run(store: Store, run_id: str, url: str, *, content: bool = False) -> Sent:
    """The stored run as one trace, sent to `url` (a run whose runner died marked crashed
    first, so its trace says so)."""
    await queries.mark_crashed_runners(store)
    events = await load_events(store, run_id)
    builder = TraceBuilder(content=content, events=events)
    for event in events:
        builder.take(event)
    return await asyncio.to_thread(_send_built, builder, traces_url(url))


class LiveTrace:
    """`loopdeck run … --otlp URL`: the run's spans built as its events come (`take`, a bus
    subscriber). What has ended is sent while the run goes, at most every `every_s`, by a
    thread of its own (the run never waits for the collector); the rest once it stopped
    (`send`), with anything a send mid-run could not deliver, within `bound` seconds of the
    stop in all, the send still going mid-run included. A span the SDK refuses stops the
    building, never the run: `send` says so."""

    def __init__(
        self,
        url: str,
        *,
        content: bool = False,
        every_s: float = LIVE_SEND_S,
        bound: float | None = None,
    ) -> None:
        self.url = traces_url(url)
        self.builder = TraceBuilder(content=content)
        self.broken: str | None = None
        self.every_s = every_s
        self.bound = bound or bound_s()
        self._handed = 0  # ended spans handed to the sender so far
        self._due = time.monotonic() + every_s
        self._sender: _Sender | None = None

    def take(self, event: Event) -> None:
        if self.broken is not None:
            return
        try:
            self.builder.take(event)
        except Exception as exc:  # the run goes on; the trace is said lost at the end
            self.broken = f"{type(exc).__name__}: {exc}"
            return
        ended = self.builder.ended
        if len(ended) > self._handed and time.monotonic() >= self._due:
            self._due = time.monotonic() + self.every_s
            if self._sender is None:
                self._sender = _Sender(self.url, self.bound)
            self._sender.put(ended[self._handed :])
            self._handed = len(ended)

    def send(self) -> Sent:
        if self.broken is not None:
            raise ExportFailed(f"the trace was not built ({self.broken}): nothing sent")
        spans = self.builder.finish()
        if not spans:
            raise ExportFailed("the run has no events: no trace to send")
        held, going = self._sender.close() if self._sender is not None else ([], None)
        last = _Delivery([*held, *spans[self._handed :]], self.url, self.bound).start()
        unsent = last.wait(last.deadline)
        late = going.wait(last.deadline) if going is not None else 0
        if unsent or late:
            why = last.why() if unsent else (going or last).why()
            raise ExportFailed(not_sent(self.url, why, unsent + late, len(spans)))
        return Sent(self.builder.trace_id, len(spans), shown(self.url))


class _Sender:
    """Sends the ended spans handed to it while the run goes, on a thread of its own, all
    that waits in one send; what fails is kept for the run's last send."""

    def __init__(self, url: str, bound: float) -> None:
        self.url = url
        self.bound = bound
        self._lock = threading.Condition()
        self._waiting: list[ReadableSpan] = []
        self._failed: list[ReadableSpan] = []
        self._going: _Delivery | None = None
        self._closed = False
        threading.Thread(target=self._run, name="loopdeck-otlp-live", daemon=True).start()

    def put(self, spans: Sequence[ReadableSpan]) -> None:
        with self._lock:
            self._waiting.extend(spans)
            self._lock.notify()

    def _next(self) -> _Delivery | None:
        with self._lock:
            while not self._waiting and not self._closed:
                self._lock.wait()
            if self._closed:
                return None
            self._going = _Delivery(self._waiting, self.url, self.bound)
            self._waiting = []
            return self._going

    def _run(self) -> None:
        while (delivery := self._next()) is not None:
            delivery.run()
            with self._lock:
                self._going = None
                if not self._closed:
                    self._failed.extend(delivery.unsent)

    def close(self) -> tuple[list[ReadableSpan], _Delivery | None]:
        """No send after this one: what waits or failed, for the run's last send, and the
        send still going (its spans its own to deliver, or to say not sent)."""
        with self._lock:
            self._closed = True
            self._lock.notify()
            going, self._going = self._going, None
            if going is not None and going.ended:  # failed or not, it is over
                self._failed.extend(going.unsent)
                going = None
            return [*self._failed, *self._waiting], going
