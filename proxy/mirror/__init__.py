"""The mirroring proxy: relay to the primary, mirror to shadow/baseline, compare, record.

config (typed settings) -> app (factory, handler, lifecycle) -> relay (primary path:
aiohttp server, body written from the upstream socket) and exchange (one mirrored
request: shadow.fetch_capture, token ids, compare, record); http1 (the lean upstream
client both lanes use) over framing (heads, body framing, chunks: no I/O); routing (run-time routes, pools per lane), admin (routes,
swap, gate, stats, records, /metrics), route_state (routes as JSON, persisted and
restored), control (what a cutover acts through), verdict (gate off the loop), server
(listeners, signals, graceful shutdown); remote, link, worker, ipc and messages (the
capture worker, its channel and the typed messages on it). Background tasks: `proxy.tasks`.
"""
