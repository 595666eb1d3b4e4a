"""The URL of the new container, built the way the proxy reaches the old one. Pure.

- host = the old container's name, id (or its 12-character form) or a network alias:
  the new container's name (resolvable on every user-defined network it joined);
- host = the old container's IP on a network: the new container's IP on that network;
- (host, port) = one of the old container's published ports: the same host, the port
  the new container got published for the same container port (same host IP first).
Port inside the container, scheme, path and query stay as they were.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from proxy.cutover.driver import ContainerInfo, DriverError

ANY_HOST_IPS = ("", "0.0.0.0", "::")
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _with_host_port(url: str, host: str, port: int | None) -> str:
    parts = urlsplit(url)
    shown = f"[{host}]" if ":" in host else host
    netloc = shown if port is None else f"{shown}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _names(info: ContainerInfo) -> set[str]:
    names = {info.name, info.id, info.id[:12]}
    for attachment in info.networks.values():
        names.update(attachment.aliases)
    return names


def _reaches(host_ip: str, host: str) -> bool:
    """Whether a port published on `host_ip` is reached through `host`."""
    return host_ip in ANY_HOST_IPS or host_ip == host or (
        host_ip in LOOPBACK and host in LOOPBACK)


def _published_port(old: ContainerInfo, host: str, port: int) -> str | None:
    """The container port ("8000/tcp") whose published binding `host:port` reaches."""
    for container_port, bindings in old.ports.items():
        for host_ip, host_port in bindings:
            if host_port == port and _reaches(host_ip, host):
                return container_port
    return None


def url_like(old: ContainerInfo, new: ContainerInfo, like_url: str) -> str:
    """Where the proxy reaches `new`, given `like_url` reaching `old`; DriverError when
    `like_url` reaches `old` in none of the ways above."""
    parts = urlsplit(like_url)
    if not parts.hostname:
        raise DriverError(f"cannot read a host in the URL {like_url!r}")
    host, port = parts.hostname, parts.port
    if host in _names(old):
        return _with_host_port(like_url, new.name, port)
    for network, attachment in old.networks.items():
        if attachment.ip and attachment.ip == host:
            ip = new.networks.get(network)
            if ip is None or not ip.ip:
                raise DriverError(f"{like_url!r} reaches {old.name!r} on network {network!r}, "
                                  f"which the new container {new.name!r} has no IP on")
            return _with_host_port(like_url, ip.ip, port)
    container_port = _published_port(old, host, port or _default_port(parts.scheme))
    if container_port is not None:
        bindings = new.ports.get(container_port, ())
        same_ip = [b for b in bindings if b[0] == host] or [
            b for b in bindings if _reaches(b[0], host)]
        if not same_ip:
            raise DriverError(f"the new container {new.name!r} has no published host port "
                              f"for {container_port} (the old one is reached at {like_url!r})")
        return _with_host_port(like_url, host, same_ip[0][1])
    raise DriverError(
        f"cannot tell how {like_url!r} reaches container {old.name!r}: its host is not the "
        f"container's name, id, alias or IP, and no published port of it is {host}:{port}; "
        f"give the new container's URL explicitly")


def network_of(info: ContainerInfo, url: str) -> str | None:
    """The network on which `url`'s host is `info`'s IP (None: a name, alias or published
    port, which stay valid when the container gets another IP)."""
    host = urlsplit(url).hostname
    for network, attachment in info.networks.items():
        if attachment.ip and attachment.ip == host:
            return network
    return None


def current_url(url: str, network: str | None, info: ContainerInfo) -> str | None:
    """`url` with the container's IP on `network` now (None: it has none there, as when
    it is not running); `url` itself when it reaches the container by name or port."""
    if network is None:
        return url
    attachment = info.networks.get(network)
    if attachment is None or not attachment.ip:
        return None
    return _with_host_port(url, attachment.ip, urlsplit(url).port)


def reaches(info: ContainerInfo, url: str) -> bool:
    """Whether `url` reaches container `info`: by its name, id or alias, its IP on one of
    its networks, or one of its published ports (the container's identity, whichever
    address a URL uses)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or _default_port(parts.scheme)
    if host in _names(info) or any(a.ip == host for a in info.networks.values() if a.ip):
        return True
    return _published_port(info, host, port) is not None
