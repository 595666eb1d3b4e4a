"""A socket transport that times each read by when the kernel received it, not by when the
event loop got round to it.

The shadow and the baseline are read by the capture worker, which runs at a lower
priority than the relay; the primary's answer is timed by the relay. On a busy host the
worker reads late, and a comparison of event-loop timestamps would make the new version
look slower than it is (and the old one, once it is the shadow after a promotion). With
`SO_TIMESTAMPNS` every read carries the arrival time of its data, so both sides are timed
at the socket, whichever process reads them and whenever it gets the CPU.

The limit: TCP merges segments that wait in the receive queue and keeps the newest
stamp, so a read later than the gap between two events times both at the second. It
takes the reader's lateness out of the timing up to one event gap, not beyond.

Linux turns receive stamping on for the whole host in deferred work, after the first
socket asks for it and while any socket still does; until that work has run a read is
stamped when it is read. So the first stamped connection also opens one idle socket that
asks for stamps for the life of the process (`keep_stamping_on`): connections that come
and go do not switch it off and on again, and only the very first reads of a process can
be timed late.

Only plain TCP (the mirror lanes' http:// backends); https keeps asyncio's own transport.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable
from time import perf_counter
from typing import Any, Protocol, TypeVar

# Linux value; the socket module does not export it (SCM_TIMESTAMPNS is the same number).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
# Below glibc's mmap threshold (128 KiB until a larger block has been freed): recvmsg
# allocates its buffer whole before each read and shrinks it after, and a buffer of
# 256 KiB was mapped and unmapped on every read while that threshold held, about 7 us per
# read against 1.1 us for the read itself (bench/README.md, issue 32). A longer answer
# takes a few more reads.
READ_BYTES = 64 * 1024
ANCILLARY_BYTES = socket.CMSG_SPACE(32)
MAX_AGE_NS = 60 * 10**9  # an older stamp is a clock step, not a queue: use the read time


_keeper: socket.socket | None = None


def keep_stamping_on() -> socket.socket:
    """One idle socket asking for receive stamps while the process lives (idempotent)."""
    global _keeper
    if _keeper is None:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        keeper.bind(("127.0.0.1", 0))
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        keeper.setblocking(False)
        _keeper = keeper
    return _keeper


def stamping_works(wait_s: float = 0.02) -> bool:
    """Whether the kernel stamps arrivals now: a datagram to the keeper, read `wait_s`
    later, must carry a stamp at least that old (blocks for `wait_s`; for tests and
    diagnostics)."""
    keeper = keep_stamping_on()
    keeper.sendto(b"probe", keeper.getsockname())
    time.sleep(wait_s)
    try:
        _data, ancillary, _flags, _addr = keeper.recvmsg(64, ANCILLARY_BYTES)
    except BlockingIOError:
        return False
    return perf_counter() - arrival_time(ancillary) >= wait_s * 0.9


class StampedProtocol(Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...

    def data_received_at(self, data: bytes, t: float) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


def arrival_time(ancillary: list[tuple[int, int, bytes]]) -> float:
    """The perf_counter time at which the data of this read arrived (now if not stamped)."""
    now = perf_counter()
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
            sec, nsec = struct.unpack("qq", payload[:16])
            age_ns = time.time_ns() - (sec * 10**9 + nsec)
            if 0 <= age_ns < MAX_AGE_NS:
                return now - age_ns / 1e9
    return now


class StampedTransport(asyncio.Transport):
    """The few transport calls Http1Connection makes, over a non-blocking socket."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 protocol: StampedProtocol) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._out = bytearray()
        self._reading = False
        self._closed = False
        protocol.connection_made(self)
        self.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._sock if name == "socket" else default

    def is_closing(self) -> bool:
        return self._closed

    def is_reading(self) -> bool:
        return self._reading

    def pause_reading(self) -> None:
        if self._reading and not self._closed:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def resume_reading(self) -> None:
        if not self._reading and not self._closed:
            self._loop.add_reader(self._fd, self._on_readable)
            self._reading = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed or not data:
            return
        if not self._out:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._lose(exc)
                return
            data = memoryview(data)[sent:]
            if not data:
                return
            self._loop.add_writer(self._fd, self._on_writable)
        self._out += data

    def _on_writable(self) -> None:
        try:
            sent = self._sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        del self._out[:sent]
        if not self._out:
            self._loop.remove_writer(self._fd)

    def _on_readable(self) -> None:
        try:
            data, ancillary, _flags, _addr = self._sock.recvmsg(READ_BYTES, ANCILLARY_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        if not data:
            self._lose(None)
            return
        self._protocol.data_received_at(data, arrival_time(ancillary))

    def close(self) -> None:
        self._lose(None)

    def abort(self) -> None:
        self._lose(None)

    def _lose(self, exc: Exception | None) -> None:
        if self._closed:
            return
        self._closed = True
        if self._reading:
            self._loop.remove_reader(self._fd)
        if self._out:
            self._loop.remove_writer(self._fd)
        self._out.clear()
        self._sock.close()
        self._loop.call_soon(self._protocol.connection_lost, exc)


P = TypeVar("P", bound=StampedProtocol)
AddrInfo = tuple[int, int, int, str, Any]


def _numeric(host: str, port: int) -> list[AddrInfo]:
    """An IP literal needs no resolver thread (asyncio's create_connection skips it too)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        address = (host, port) if family == socket.AF_INET else (host, port, 0, 0)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address)]
    return []


async def open_stamped(protocol_factory: Callable[[], P], host: str,
                       port: int) -> tuple[StampedTransport, P]:
    """Connect like loop.create_connection, with arrival timestamps on every read."""
    loop = asyncio.get_running_loop()
    keep_stamping_on()
    infos = _numeric(host, port) or await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"no address for {host!r}")
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        protocol = protocol_factory()
        return StampedTransport(loop, sock, protocol), protocol
    raise error
