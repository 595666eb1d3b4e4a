"""nginx as the reference reverse proxy: a generated config in a temp prefix, run in the foreground.

Four configurations, all with one worker process pinned like the proxy under test:
- "plain" (path `nginx-plain`): the Debian package as a plain reverse proxy,
  `location / { proxy_pass ...; }` with the package's http-block defaults (HTTP/1.0 to the
  upstream, a new upstream connection per request, proxy buffering on, an access log);
- "streaming" (path `nginx`), nginx at its best for SSE: `proxy_buffering off`, HTTP/1.1 to
  the upstream with a keep-alive pool, no access log;
- "mirror" (path `nginx-mirror`), the peer that does the proxy's fan-out: "streaming" plus
  nginx's `mirror` module (`mirror_request_body on`): each request also goes, body included,
  as a background subrequest to every mirror upstream, and nginx reads each answer to its
  end. nginx's mirror subrequests are header-only: as shipped, nginx reads a mirror's
  response head and closes the connection (a vLLM shadow then aborts the generation).
  `proxy_store` on the mirror location is what makes nginx read the body, into a temp
  file renamed over one scratch file per mirror: the proxy's work, read and discarded;
- "mirror-headers" (path `nginx-mirror-headers`): the same without `proxy_store`, nginx's
  mirror as shipped, which reads only the head of each mirror's answer.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from _procs import pinned

# Process settings and temp folders, the same for all (worker_rlimit_nofile: enough
# descriptors for 1000 streams and their upstream connections). The worker runs as the
# bench's user (nginx ignores `user` unless started as root), so it can write its temp
# files in the bench's private temp folder.
_HEAD = """\
user {user} {group};
worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{
    worker_connections 16384;
}}
http {{
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
"""

_PLAIN_CONF = _HEAD + """\
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 65;
    access_log {prefix}/access.log;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            proxy_pass http://127.0.0.1:{upstream_port};
        }}
    }}
}}
"""

# An upstream with a keep-alive pool, and how every streaming location talks to it.
_UPSTREAM = """\
    upstream {name} {{
        server 127.0.0.1:{port};
        keepalive 1024;
        keepalive_requests 1000000;
    }}
"""
_STREAMING = """\
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
"""
# Mirror subrequests go to internal locations; $request_uri keeps the client's path.
# proxy_store needs proxy buffering; the scratch file sits in the temp folder, which
# nginx makes writable for its worker.
_MIRROR_LOCATION = """\
        location = /_mirror/{name} {{
            internal;
            proxy_pass http://{name}$request_uri;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout 300s;
{store}\
        }}
"""
_STORE = "            proxy_store {prefix}/tmp/proxy/{name}.discarded;\n"

_STREAMING_CONF = _HEAD + """\
    access_log off;
    keepalive_requests 1000000;
{upstreams}\
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
{mirrors}\
            proxy_pass http://backend;
""" + _STREAMING + """\
        }}
{mirror_locations}\
    }}
}}
"""

NginxKind = Literal["plain", "streaming", "mirror", "mirror-headers"]


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(p).exists()), None
    )


def config_text(prefix: Path, port: int, upstream_port: int, kind: NginxKind = "streaming",
                mirror_ports: Sequence[int] = ()) -> str:
    """nginx.conf for `kind`; `mirror_ports` (the mirror kinds) are the mirrors' ports."""
    user = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    if kind == "plain":
        return _PLAIN_CONF.format(prefix=prefix, port=port, upstream_port=upstream_port,
                                  user=user, group=group)
    mirroring = kind in ("mirror", "mirror-headers")
    if mirroring and not mirror_ports:
        raise ValueError(f"nginx kind {kind!r} needs at least one mirror port")
    names = [f"mirror{i}" for i in range(len(mirror_ports))] if mirroring else []
    upstreams = _UPSTREAM.format(name="backend", port=upstream_port) + "".join(
        _UPSTREAM.format(name=name, port=p) for name, p in zip(names, mirror_ports))
    mirrors = "".join(f"            mirror /_mirror/{name};\n" for name in names)
    if names:
        mirrors += "            mirror_request_body on;\n"
    locations = "".join(_MIRROR_LOCATION.format(
        name=name, store=_STORE.format(prefix=prefix, name=name) if kind == "mirror" else "")
        for name in names)
    return _STREAMING_CONF.format(prefix=prefix, port=port, upstreams=upstreams, user=user,
                                  group=group,
                                  mirrors=mirrors, mirror_locations=locations)


def write_config(prefix: Path, port: int, upstream_port: int, kind: NginxKind = "streaming",
                 mirror_ports: Sequence[int] = ()) -> Path:
    """Write nginx.conf and its temp folders under `prefix`; return the config path."""
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    (prefix / "logs").mkdir(exist_ok=True)
    conf = prefix / "nginx.conf"
    conf.write_text(config_text(prefix, port, upstream_port, kind, mirror_ports))
    return conf


def nginx_argv(prefix: Path, port: int, upstream_port: int, cpus: Sequence[int],
               kind: NginxKind = "streaming", mirror_ports: Sequence[int] = ()) -> list[str]:
    """The command line of a foreground nginx relaying 127.0.0.1:port to upstream_port."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx not found (Debian package `nginx`); use --paths without nginx")
    conf = write_config(prefix, port, upstream_port, kind, mirror_ports)
    # The master stays on `cpus` too: taskset's affinity is inherited by the worker.
    return pinned([binary, "-c", str(conf), "-p", str(prefix), "-e", str(prefix / "error.log")], cpus)
