"""nginx as the reference reverse proxy: a generated config in a temp prefix, run in the foreground.

Two configurations, both with one worker process pinned like the proxy under test:
- "plain" (path `nginx-plain`), what the issue names: the Debian package as a plain reverse
  proxy, `location / { proxy_pass ...; }` with the package's http-block defaults (HTTP/1.0
  to the upstream, a new upstream connection per request, proxy buffering on, an access log);
- "streaming" (path `nginx`), nginx at its best for SSE: `proxy_buffering off`, HTTP/1.1 to
  the upstream with a keep-alive pool, no access log.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from _procs import pinned

# Process settings and temp folders, the same for both (worker_rlimit_nofile: enough
# descriptors for 1000 streams and their upstream connections).
_HEAD = """\
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

_STREAMING_CONF = _HEAD + """\
    access_log off;
    keepalive_requests 1000000;
    upstream backend {{
        server 127.0.0.1:{upstream_port};
        keepalive 1024;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(p).exists()), None
    )


def write_config(prefix: Path, port: int, upstream_port: int, plain: bool = False) -> Path:
    """Write nginx.conf and its temp folders under `prefix`; return the config path."""
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    (prefix / "logs").mkdir(exist_ok=True)
    conf = prefix / "nginx.conf"
    template = _PLAIN_CONF if plain else _STREAMING_CONF
    conf.write_text(template.format(prefix=prefix, port=port, upstream_port=upstream_port))
    return conf


def nginx_argv(prefix: Path, port: int, upstream_port: int, cpus: Sequence[int],
               plain: bool = False) -> list[str]:
    """The command line of a foreground nginx relaying 127.0.0.1:port to upstream_port."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx not found (Debian package `nginx`); use --paths without nginx")
    conf = write_config(prefix, port, upstream_port, plain)
    # The master stays on `cpus` too: taskset's affinity is inherited by the worker.
    return pinned([binary, "-c", str(conf), "-p", str(prefix), "-e", str(prefix / "error.log")], cpus)
