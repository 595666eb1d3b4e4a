"""The fleet verdict: the gate over every sidecar's metrics, read from Prometheus."""
