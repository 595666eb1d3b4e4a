"""The admin listener: routes, swap, stats, records and /metrics (api), and the gate in the
forms Argo Rollouts and Flagger call (gate_hooks)."""
