"""The tune's candidate mirrors keep a pool per racing candidate only: one that stops
racing has its pool closed, so a later candidate at the same address (Docker reuses a
removed container's IP) never inherits its keep-alive connections, and a long tune does
not keep a pool per candidate it ever raced."""

from __future__ import annotations

import asyncio
from typing import Any

from multidict import CIMultiDict

from proxy.mirror.candidates import CandidateMirrors


class _Tune:
    def __init__(self) -> None:
        self.targets: dict[str, str] = {}
        self.sample_rate = 1.0

    def racing(self) -> dict[str, str]:
        return dict(self.targets)


async def test_a_candidate_that_stops_racing_loses_its_pool(make_config: Any) -> None:
    tune = _Tune()
    mirrors = CandidateMirrors(make_config("http://127.0.0.1:9", None), tune)  # type: ignore[arg-type]
    a, b = "http://10.0.0.5:8000", "http://10.0.0.6:8000"
    pool_a, pool_b = mirrors._shadow(a).pool, mirrors._shadow(b).pool
    assert mirrors.known() == {a, b}
    mirrors._forget({b})  # what a request does while only b races
    assert mirrors.known() == {b}
    await asyncio.sleep(0.05)  # the pool's close runs as a task
    assert pool_a._closed and not pool_b._closed
    assert mirrors._shadow(a).pool is not pool_a  # a new candidate at a's address: a new pool
    # a request with no race left forgets every pool
    assert mirrors.start(None, "/v1/completions", CIMultiDict(), {},  # type: ignore[arg-type]
                         "completions") is None
    assert mirrors.known() == set()
    await mirrors.close(1.0)
