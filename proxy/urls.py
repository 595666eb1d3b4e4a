"""Backend URLs: their one accepted form, and when two of them are the same backend.

Below every package that names backends (the mirror's routes, the cutover's spec, the
reports), so none of them reaches into another for it. `same_backend` compares what
reaches the engine: scheme, the addresses the host resolves to, the port (the scheme's
default when none is written) and the path; credentials and a trailing slash do not
count. `role_conflicts` names the setups whose evidence would mean nothing,
`self_conflicts` the routes that lead back into the proxy.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from proxy.credentials import redact

DEFAULT_PORTS = {"http": 80, "https": 443}


class UrlError(ValueError):
    """A backend URL that cannot work; the message quotes it (credentials hidden)."""


def normalize_backend_url(url: str, what: str = "backend URL") -> str:
    """Return `url` without a trailing slash; reject anything but http(s)://host[:port][/path]."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UrlError(f"{what} must look like http://host:port, got {redact(url)!r}")
    if parts.query or parts.fragment:
        raise UrlError(f"{what} must not carry a query or fragment, got {redact(url)!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise UrlError(f"{what} has a bad port: {redact(url)!r}") from None
    return url.strip().rstrip("/")


@dataclass(frozen=True)
class BackendKey:
    """What makes two URLs one backend: scheme, resolved addresses, port, path."""

    scheme: str
    addresses: frozenset[str]
    port: int
    path: str

    def same(self, other: BackendKey) -> bool:
        return (self.scheme, self.port, self.path) == (other.scheme, other.port, other.path) \
            and bool(self.addresses & other.addresses)


def backend_key(url: str) -> BackendKey:
    """`url`'s key; a host that does not resolve is compared by its name."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port or DEFAULT_PORTS.get(scheme, 0)
    try:
        found = {str(info[4][0]) for info in socket.getaddrinfo(host, port,
                                                               type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError):
        found = set()
    return BackendKey(scheme, frozenset(found or {host}), port, parts.path.rstrip("/") or "/")


def same_backend(a: str, b: str) -> bool:
    return backend_key(a).same(backend_key(b))


def role_conflicts(primary: str | None, shadow: str | None, baseline: str | None,
                   names: tuple[str, str, str] = ("primary", "shadow", "baseline")
                   ) -> tuple[list[str], list[str]]:
    """(errors, warnings) of a setup: a shadow that is the primary compares an engine with
    itself, a baseline that is the shadow measures new's noise as old's (errors); a
    baseline that is the primary measures noise within one engine, not between two copies
    (a warning). `names` label the three roles in the messages (flags, fields)."""
    errors: list[str] = []
    warnings: list[str] = []
    p, s, b = names
    if primary and shadow and same_backend(primary, shadow):
        errors.append(f"the {s} {redact(shadow)!r} is the {p} {redact(primary)!r}: new "
                      "would be compared with old itself")
    if shadow and baseline and same_backend(shadow, baseline):
        errors.append(f"the {b} {redact(baseline)!r} is the {s} (new) {redact(shadow)!r}: "
                      "new's own noise would be taken for old's")
    if primary and baseline and same_backend(primary, baseline):
        warnings.append(f"the {b} {redact(baseline)!r} is the {p} {redact(primary)!r}: it "
                        "measures noise within one engine, not between two copies of old")
    return errors, warnings


def _local_address(address: str) -> bool:
    """Whether `address` is one of this machine's own (a socket can be bound to it)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


def reaches_listener(url: str, host: str, port: int) -> bool:
    """Whether `url` connects to a listener of this machine bound to `host`:`port`
    (a wildcard host listens on every local address)."""
    key = backend_key(url)
    if key.port != port:
        return False
    if host in ("", "0.0.0.0", "::"):
        return any(_local_address(address) for address in key.addresses)
    return bool(key.addresses & backend_key(f"http://{host}:{port}").addresses)


def self_conflicts(routes: dict[str, str | None],
                   listeners: tuple[tuple[str, int], ...]) -> list[str]:
    """Errors for each route (field -> URL) that points at one of the proxy's own
    `listeners` (host, port): a request sent there would be relayed to itself, again."""
    errors = []
    for field, url in routes.items():
        for host, port in listeners:
            if url and port and reaches_listener(url, host, port):
                errors.append(f"{field} {redact(url)!r} is this proxy's own listener "
                              f"({host or '*'}:{port}): each request would be relayed to "
                              "itself")
                break
    return errors
