"""A Unix-socket forwarder standing in for the Docker daemon, which a test can cut and
restore: the proxy's DOCKER_HOST points at it, the real daemon sits behind it."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

DAEMON_SOCKET = "/var/run/docker.sock"


class DaemonForwarder:
    """`cut()`: the listener and every open connection close (calls fail as with a dead
    daemon); `restore()`: it listens again at the same path."""

    def __init__(self, path: Path, target: str = DAEMON_SOCKET) -> None:
        self.path = path
        self.target = target
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def docker_host(self) -> str:
        return f"unix://{self.path}"

    def restore(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._open = self._open, set()
        if listener is not None:
            listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a client gets ENOENT, as with no daemon at all

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for conn in (source, sink):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
