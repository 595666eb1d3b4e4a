"""Shared hypothesis settings for the fuzz tests: seeded, bounded, no example database.

`derandomize` derives each test's examples from its name, so a failure replays on every
run and machine; the counts keep CI short. VLLM_CUTOVER_FUZZ_SCALE=N runs N times as
many examples (still seeded) to look further on a spare machine.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALE = float(os.environ.get("VLLM_CUTOVER_FUZZ_SCALE", "1"))


def fuzz_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max(1, int(max_examples * SCALE)),
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much],
    )
