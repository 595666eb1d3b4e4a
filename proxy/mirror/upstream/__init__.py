"""The upstream side of both lanes: the lean HTTP/1.1 client and the routes it serves.

http1 (connections, pools, body framing, reading answers off the socket), stamped (the
socket reader that keeps each chunk's kernel arrival time), routing (run-time routes and
a pool per lane). Imports only `proxy.mirror.config` from the rest of the mirror.
"""
