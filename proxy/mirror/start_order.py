"""Evidence counted in start order: a record enters the evidence metrics (what the fleet
gate reads through Prometheus) only once every exchange that started before it has ended.

Records are made when exchanges end, so counting them at once counts the quick answers
while a slow or hung one is still out: a version that hangs until the shadow timeout on
some requests would pass the fleet gate on its survivors, as it once passed the store's
gate (`Mirror.judged_until` holds that one to the same order). Held records wait as long
as the oldest exchange out: its shadow is bounded by `--shadow-timeout`, its primary
answer by nothing the proxy sets (a long generation, a slow client), so past `HELD_LIMIT`
the oldest are counted anyway (a warning says so, at most once a minute) rather than kept
without bound. What is held is the record without its answers' texts, token ids and
logprobs (`slim`): the metrics read times, lengths, errors and outcomes only.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools

from proxy.compare.types import ExchangeRecord

# About 6 minutes of records at 30 a second (slimmed: under 1 KB each): more than a shadow
# timeout's worth at the rates a sidecar mirrors.
HELD_LIMIT = 10_000
FORCED_LOG_EVERY_S = 60.0


def slim(record: ExchangeRecord) -> ExchangeRecord:
    """`record` with only what the evidence metrics read: no texts, ids, logprobs,
    inter-token gaps or parsed answers (they are most of a record's memory)."""
    return dataclasses.replace(record, request_json=None, captures=tuple(
        dataclasses.replace(c, text="", itl_s=(), token_ids=None, top_logprobs=None,
                            sampled_tokens=None, token_char_ends=None, answer=None)
        for c in record.captures))


class StartOrderHold:
    """Records held until the cutoff on start times passes them, oldest start first."""

    def __init__(self, limit: int = HELD_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self._heap: list[tuple[float, int, ExchangeRecord]] = []
        self._order = itertools.count()  # equal starts leave in the order they came

    def __len__(self) -> int:
        return len(self._heap)

    def hold(self, record: ExchangeRecord) -> list[ExchangeRecord]:
        """Keep `record`; returns the oldest ones over the limit (to count now)."""
        heapq.heappush(self._heap, (record.started_unix, next(self._order), record))
        return [heapq.heappop(self._heap)[2] for _ in range(len(self._heap) - self.limit)]

    def release(self, until_unix: float) -> list[ExchangeRecord]:
        """The records started before `until_unix`, oldest start first."""
        out = []
        while self._heap and self._heap[0][0] < until_unix:
            out.append(heapq.heappop(self._heap)[2])
        return out
