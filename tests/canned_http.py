"""A real HTTP server on loopback that answers every GET and POST with one canned body,
for tests of clients reading answers they cannot trust (Prometheus, a sidecar)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def canned_http() -> Iterator[Callable[..., str]]:
    """Yields `answer(body, status=200) -> base URL`: from then on every request gets
    `body` with that status."""
    current = [b"{}"]
    code = [200]

    class Canned(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            # read the request's body first: closing with it unread makes the kernel reset
            # the connection, and the client may see the reset instead of the answer
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(code[0])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(current[0])))
            self.end_headers()
            self.wfile.write(current[0])

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def answer(body: bytes, status: int = 200) -> str:
        current[0], code[0] = body, status
        return f"http://127.0.0.1:{server.server_address[1]}"

    try:
        yield answer
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def endless_http(canned: dict[str, bytes] | None = None, *,
                 byte_every_s: float = 0.0) -> Iterator[str]:
    """Yields a base URL whose every answer is 200 with a body that never ends: 64 KiB
    pieces as fast as the client reads, or one byte every `byte_every_s`. Paths in
    `canned` get their canned JSON body instead (an engine that lists its models)."""
    canned = canned or {}

    class Endless(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the body runs to the close

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            path = self.path.split("?", 1)[0]
            self.send_response(200)
            if path in canned:
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(canned[path])))
                self.end_headers()
                self.wfile.write(canned[path])
                return
            # POSTs are eval's streamed generation requests.
            self.send_header("Content-Type", "text/event-stream" if self.command == "POST"
                             else "application/json")
            self.end_headers()
            piece = b"data: " + b"[" * 65520 + b"\n\n" if byte_every_s == 0 else b"["
            try:
                while True:
                    self.wfile.write(piece)
                    if byte_every_s:
                        self.wfile.flush()
                        time.sleep(byte_every_s)
            except OSError:
                pass

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
