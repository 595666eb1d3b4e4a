"""The zero-downtime cutover: a persisted state machine (pure core), a container driver
behind a small Protocol (Docker today), and the proxy's routes and evidence it acts on.

The reconciler runs inside the sidecar proxy process (it owns the routes, so a promotion
is one atomic routing change, and it outlives any CLI call); the CLI only talks to the
admin API. Only `proxy.cutover.shell.docker_driver` touches the Docker socket.
"""
