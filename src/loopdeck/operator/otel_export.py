"""A run as one OpenTelemetry trace sent over OTLP/HTTP: `loopdeck export RUN_ID --otlp URL`
after the fact (`export_run`), `loopdeck run … --otlp URL` live (`LiveTrace`, a bus
subscriber). The spans are `operator/otel_spans.py`'s; the SDK's exporter sends them, with
its `OTEL_EXPORTER_OTLP_*` variables (headers for a backend's auth, timeout); what stops it
is said once, naming the URL.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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
CLOSE_WAIT_S = 30.0  # the live sender's batches waited for when the run stops
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


class _Watched(requests.Session):
    """The exporter's HTTP session, keeping what last went wrong for the one message that
    names the URL: the system's words ("Connection refused") or the HTTP status."""

    said = ""

    def request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = super().request(*args, **kwargs)
        except requests.RequestException as exc:
            found = ERRNO_WORDS.search(str(exc))
            self.said = found.group(1).strip() if found else str(exc)
            raise
        if response.status_code >= 300:
            self.said = f"HTTP {response.status_code} {response.reason or ''}".strip()
        return response


@contextmanager
def _exporter_quiet() -> Iterator[None]:
    """The SDK exporter's log lines (retries, failures) kept off the terminal while it sends:
    what failed is said once, naming the URL."""
    logger = logging.getLogger("opentelemetry.exporter")
    quiet, propagate = logging.NullHandler(), logger.propagate
    logger.addHandler(quiet)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(quiet)
        logger.propagate = propagate


def send(spans: Sequence[ReadableSpan], url: str) -> None:
    """The spans to the OTLP/HTTP endpoint (headers and timeout from the SDK's
    `OTEL_EXPORTER_OTLP_*` variables); `ExportFailed` naming the URL if it is not taken."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    session = _Watched()
    exporter = OTLPSpanExporter(endpoint=url, session=session)
    try:
        with _exporter_quiet():
            for start in range(0, len(spans), BATCH):
                if exporter.export(spans[start : start + BATCH]) is not SpanExportResult.SUCCESS:
                    why = session.said or "the endpoint did not take it"
                    raise ExportFailed(f"cannot send the trace to {shown(url)}: {why}")
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]


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
    builder = TraceBuilder(content=content)
    for event in await load_events(store, run_id):
        builder.take(event)
    return await asyncio.to_thread(_send_built, builder, traces_url(url))


class LiveTrace:
    """`loopdeck run … --otlp URL`: the run's spans built as its events come (`take`, a bus
    subscriber). What has ended is sent while the run goes, at most every `every_s`, by a
    thread of its own (the run never waits for the collector); the rest once it stopped
    (`send`), with anything a send mid-run could not deliver. A span the SDK refuses stops
    the building, never the run: `send` says so."""

    def __init__(self, url: str, *, content: bool = False, every_s: float = LIVE_SEND_S) -> None:
        self.url = traces_url(url)
        self.builder = TraceBuilder(content=content)
        self.broken: str | None = None
        self.every_s = every_s
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
                self._sender = _Sender(self.url)
            self._sender.put(ended[self._handed :])
            self._handed = len(ended)

    def send(self) -> Sent:
        if self.broken is not None:
            raise ExportFailed(f"the trace was not built ({self.broken}): nothing sent")
        unsent = self._sender.close() if self._sender is not None else []
        spans = self.builder.finish()
        if not spans:
            raise ExportFailed("the run has no events: no trace to send")
        send([*unsent, *spans[self._handed :]], self.url)
        return Sent(self.builder.trace_id, len(spans), shown(self.url))


class _Sender:
    """Sends batches of ended spans on a thread of its own, in order; a batch that fails is
    kept for the run's last send (which says why if it fails too)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._batches: queue.SimpleQueue[Sequence[ReadableSpan] | None] = queue.SimpleQueue()
        self._failed: list[ReadableSpan] = []
        self._thread = threading.Thread(target=self._run, name="loopdeck-otlp", daemon=True)
        self._thread.start()

    def put(self, spans: Sequence[ReadableSpan]) -> None:
        self._batches.put(list(spans))

    def _run(self) -> None:
        while (batch := self._batches.get()) is not None:
            try:
                send(batch, self.url)
            except ExportFailed:
                self._failed.extend(batch)

    def close(self) -> list[ReadableSpan]:
        """Waits for the batches handed so far (bounded: a hung collector is the last
        send's to report); what did not go."""
        self._batches.put(None)
        self._thread.join(CLOSE_WAIT_S)
        return list(self._failed)
