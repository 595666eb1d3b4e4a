"""A bare aiohttp (+uvloop) streaming relay: the floor a Python proxy can reach here.

No mirroring, no capture: it forwards the request to one upstream and copies the
response chunk by chunk. The benchmark runs it as an extra reference (`--paths ...,bare`)
so the cost of the proxy's mirroring and capture shows apart from aiohttp's own cost.

Run: python bench/_relay.py --port P --upstream http://127.0.0.1:U
"""

from __future__ import annotations

import argparse

from aiohttp import ClientSession, TCPConnector, web

_HOP = frozenset(
    ("connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade")
)
_SESSION = web.AppKey("session", ClientSession)
_UPSTREAM = web.AppKey("upstream", str)


async def _relay(request: web.Request) -> web.StreamResponse:
    session = request.app[_SESSION]
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
    body = await request.read()
    async with session.request(
        request.method, request.app[_UPSTREAM] + request.path_qs, headers=headers, data=body
    ) as upstream:
        response = web.StreamResponse(
            status=upstream.status,
            headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP},
        )
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


def make_app(upstream: str) -> web.Application:
    app = web.Application()
    app[_UPSTREAM] = upstream.rstrip("/")

    async def session_ctx(app: web.Application):
        app[_SESSION] = ClientSession(connector=TCPConnector(limit=0), auto_decompress=False)
        yield
        await app[_SESSION].close()

    app.cleanup_ctx.append(session_ctx)
    app.router.add_route("*", "/{tail:.*}", _relay)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(
        make_app(args.upstream), host="127.0.0.1", port=args.port, print=None, backlog=4096,
        access_log=None,
    )


if __name__ == "__main__":
    main()
