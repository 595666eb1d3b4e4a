"""Gate criteria for tests that judge a handful of fake-backend requests on tokens alone.

The live gate's bounds hold at every look, so a pass at the defaults needs hundreds of
requests (the error check alone ~1,000 for its 1 % margin). Tests of the plumbing around
the gate (admin API, hooks, reports) use these looser criteria instead: latency not
judged, errors not judged, the verdict at 50 % confidence.
"""

from __future__ import annotations

from typing import Any

from proxy.gate.criteria import RATIO_LIMITS, GateCriteria


def tokens_only(**overrides: Any) -> GateCriteria:
    values: dict[str, Any] = {e.field: None for e in RATIO_LIMITS}
    values.update(confidence=0.5, max_error_rate_excess=1.0, max_length_shift=None)
    values.update(overrides)
    return GateCriteria(**values)
