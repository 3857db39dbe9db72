"""A TLS terminator on 127.0.0.1 in front of a plain-http server (llama-server is built
without TLS): the remote backend then speaks https to a certificate signed by a test CA."""

from __future__ import annotations

import asyncio
import ssl


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


class TlsProxy:
    def __init__(self, upstream_port: int, context: ssl.SSLContext):
        self.upstream_port = upstream_port
        self.context = context
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> "TlsProxy":
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
