"""The cutover's I/O shell: the Docker driver (the only code that touches the Docker
socket), the reconciler that runs the pure state machine against the proxy and the
driver, the service and admin endpoints that start it, the client the CLI talks through,
the engine probes, GPU discovery and back-off. The decisions are in `proxy.cutover`."""
