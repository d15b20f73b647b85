"""A TCP proxy on loopback that delays every chunk by `delay_s` each way: a PostgreSQL server
as far away as one across a network, for the workers' bench (this machine has no `netem`).

    with DelayingProxy(target_port, 0.001) as port: ...   # connect to 127.0.0.1:port
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import TracebackType


class DelayingProxy:
    def __init__(self, target_port: int, delay_s: float) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    def __enter__(self) -> int:
        self._thread.start()
        self._ready.wait()
        return self.port

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._connected, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", self.target_port
            )
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(
                self._carry(reader, upstream_writer), self._carry(upstream_reader, writer),
                return_exceptions=True,
            )  # fmt: skip
        except asyncio.CancelledError:  # the proxy stopped with the connection open: it ends
            writer.close()
            upstream_writer.close()

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Each chunk read is written `delay_s` after it arrived, in order."""
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await chunks.get()
                if not data:
                    break
                if (wait := due - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            writer.close()

        sending = asyncio.create_task(send())
        try:
            while data := await reader.read(65536):
                chunks.put_nowait((time.monotonic() + self.delay_s, data))
        finally:
            chunks.put_nowait((0.0, b""))
            await sending
