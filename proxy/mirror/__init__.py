"""The mirroring proxy: relay to the primary, mirror to shadow/baseline, compare, record.

Here: config (typed settings) -> app (factory, handler, lifecycle) -> relay (primary
path: aiohttp server, body written from the upstream socket) and exchange (one mirrored
request: shadow.fetch_capture, token ids, compare, record); admission, load and
collector (what may be mirrored under load, and GC pauses kept short); listener and
server (sockets, signals, graceful shutdown); route_state (routes persisted and
restored), control (what a cutover acts through), evidence and verdict (the gate off the
loop). Rooms:
- `upstream/`: the lean HTTP/1.1 client both lanes use (http1 over framing: heads, body
  framing and chunks with no I/O; stamped) and routing;
- `worker/`: the capture worker process and its channel (process, link, remote, ipc,
  messages, priority);
- `admin/`: the admin listener (api) and the gate's Argo / Flagger forms (gate_hooks).
Background tasks: `proxy.tasks`.
"""
