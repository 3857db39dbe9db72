"""The server's stdio transport: stdin read on the event loop itself.

pygls' own stdio reader hands every header line and every body to a thread of its pool
(`run_in_executor`): three thread hops a message, each a wake-up and a GIL hand-over.
Warm, that costs little. After a pause (the user reads a suggestion for a few seconds,
then presses Tab) every hop meets cold caches: `bench lsp --session accept` on an Intel
Xeon VM saw 24 ms between a didChange's header arriving and its body being read, most
of an accept's ~30 ms budget. Read on the loop, a message that has arrived is framed and
handled in one go. The framing and dispatch stay pygls' (`run_async`).

stdin that epoll cannot watch (a regular file) keeps pygls' own reader.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import sys
import threading
from typing import Any, BinaryIO

from pygls.io_ import StdoutWriter, run_async

log = logging.getLogger(__name__)

# Bounds a header line only; bodies are read by their Content-Length.
HEADER_LIMIT = 1 << 20


class LoopReader:
    """pygls' AsyncReader over an asyncio stream: readline and readexactly, b"" at the end."""

    def __init__(self, stream: asyncio.StreamReader):
        self.stream = stream

    async def readline(self) -> bytes:
        try:
            return await self.stream.readline()
        except ValueError:
            # A header line past the stream's limit: asyncio has dropped it. Hand pygls a
            # line that is no header, so the loop goes on to the next message.
            log.warning("dropped a header line longer than %d bytes", HEADER_LIMIT)
            return b"X-Dropped: overlong header line\r\n"

    async def readexactly(self, n: int) -> bytes:
        try:
            return await self.stream.readexactly(n)
        except asyncio.IncompleteReadError as exc:  # the client went away mid-message
            return exc.partial


def watchable(stdin: BinaryIO) -> bool:
    """A pipe, socket or terminal: what the loop's selector can wait on."""
    try:
        mode = os.fstat(stdin.fileno()).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


async def _serve(server: Any, stdin: BinaryIO) -> None:
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=HEADER_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), stdin)
    await run_async(stop_event=server._stop_event, reader=LoopReader(stream),
                    protocol=server.protocol, logger=log, error_handler=server.report_server_error)


def start_io(server: Any, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """What pygls' `server.start_io()` does (its writer, its stop event, its shutdown), with
    stdin read on the loop."""
    stdin = stdin or sys.stdin.buffer
    if not watchable(stdin):
        server.start_io(stdin, stdout)
        return
    # pygls' shutdown() sets this to end its read loop; it is pygls' own attribute.
    server._stop_event = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
    try:
        asyncio.run(_serve(server, stdin))
    except BrokenPipeError:
        log.error("the client's pipe closed; shutting down")
    except (KeyboardInterrupt, SystemExit):  # `exit` ends the process with sys.exit, as in pygls
        pass
    finally:
        server.shutdown()
