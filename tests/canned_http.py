"""A real HTTP server on loopback that answers every GET and POST with one canned body,
for tests of clients reading answers they cannot trust (Prometheus, a sidecar)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def canned_http() -> Iterator[Callable[[bytes], str]]:
    """Yields `answer(body) -> base URL`: from then on every request gets `body`."""
    current = [b"{}"]

    class Canned(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(current[0])))
            self.end_headers()
            self.wfile.write(current[0])

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def answer(body: bytes) -> str:
        current[0] = body
        return f"http://127.0.0.1:{server.server_address[1]}"

    try:
        yield answer
    finally:
        server.shutdown()
        server.server_close()
