"""Framed messages between the proxy and its capture worker over a socketpair.

Each frame is a 4-byte big-endian length and a pickle of one message of
`proxy.mirror.worker.messages` in its wire form. Both ends are this program:
the parent makes the socketpair and hands one end to the child it starts, so no
other process can write a frame (pickle is only ever read from our own child or parent).
Writes never block: the transport buffers, and the sender watches `buffered_bytes`.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import struct
from collections.abc import Callable
from typing import Any

from proxy.mirror.worker.messages import from_wire, to_wire

log = logging.getLogger(__name__)

_LENGTH = struct.Struct("!I")
MAX_FRAME_BYTES = 512 * 1024 * 1024


class Channel(asyncio.Protocol):
    """One end of the pair: `send(message)`; every whole frame read goes to `on_message`
    as the message it was (a frame that is not one is logged and skipped)."""

    def __init__(self, on_message: Callable[[Any], None],
                 on_lost: Callable[[Exception | None], None]) -> None:
        self._on_message = on_message
        self._on_lost = on_lost
        self._buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.handled_bytes = 0  # of the frames read, those already given to on_message

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        pos, end = 0, len(buffer)
        while end - pos >= 4:
            (size,) = _LENGTH.unpack_from(buffer, pos)
            if size > MAX_FRAME_BYTES:
                log.error("capture channel: frame of %d bytes, closing", size)
                self.close()
                return
            if end - pos - 4 < size:
                break
            frame = buffer[pos + 4:pos + 4 + size]
            pos += 4 + size
            message: Any = None
            try:
                message = from_wire(pickle.loads(frame))
                self._on_message(message)
            except Exception:  # one bad message must not end the channel
                log.exception("capture channel: handling %s failed", type(message).__name__
                              if message is not None else "a frame")
            self.handled_bytes += 4 + size
        if pos:
            del buffer[:pos]

    def send(self, message: Any) -> int:
        """Queue `message`; the bytes queued (0: the channel is closed)."""
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            return 0
        data = pickle.dumps(to_wire(message), protocol=pickle.HIGHEST_PROTOCOL)
        transport.writelines((_LENGTH.pack(len(data)), data))
        return 4 + len(data)

    @property
    def buffered_bytes(self) -> int:
        transport = self.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_lost(exc)
