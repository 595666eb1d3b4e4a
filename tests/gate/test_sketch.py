"""The windowless quantile samples: a log-bucket histogram read by rank brackets the exact
order statistics within 0.1 %, so the quantile checks' bounds only widen; the gate's
inputs keep every sample since evidence began (records and the store, grown look by
look, alike); and beyond the old 5,000-record window a p99 bound keeps tightening."""

from __future__ import annotations

import math
import pickle
import random
from dataclasses import replace
from pathlib import Path

import pytest

from proxy.capture.types import Capture, RequestMeta
from proxy.compare.types import Comparison, ExchangeRecord
from proxy.evidence.store import SqliteStore
from proxy.gate.criteria import GateCriteria
from proxy.gate.sketch import (
    WIDTH,
    LogHistogram,
    SortedSample,
    bucket_of,
    lower_edge,
    upper_edge,
)
from proxy.gate.tally import LATENCY_WINDOW, GateInputs
from proxy.gate.verdict import evaluate
from tests.evidence_records import BASE, NEW, OLD, record


def test_each_value_lies_in_its_bucket() -> None:
    rng = random.Random(1)
    for value in [0.0, 1e-7, 1e-6, 2e-6, *(rng.lognormvariate(-3, 2) for _ in range(2000))]:
        bucket = bucket_of(value)
        assert lower_edge(bucket) <= value < upper_edge(bucket) or (bucket == 0 and value <= 1e-6)
        if bucket > 0:
            assert upper_edge(bucket) / lower_edge(bucket) == pytest.approx(1 + WIDTH)


def test_ranks_bracket_the_exact_order_statistics() -> None:
    rng = random.Random(2)
    values = [rng.lognormvariate(-3, 0.8) for _ in range(5000)]
    sketch = LogHistogram()
    sketch.add(values)
    exact = sorted(values)
    assert len(sketch) == 5000
    for rank in (1, 2, 50, 2500, 4950, 4999, 5000):
        assert sketch.low(rank) <= exact[rank - 1] <= sketch.high(rank)
        assert sketch.high(rank) / sketch.low(rank) <= 1 + WIDTH + 1e-12
    with pytest.raises(IndexError):
        sketch.low(5001)


def test_a_frozen_copy_does_not_grow_and_pickles_whole() -> None:
    sketch = LogHistogram()
    sketch.add([0.1, 0.2, 0.3])
    frozen = sketch.frozen()
    sketch.add([0.4])
    assert (len(frozen), len(sketch)) == (3, 4)
    back = pickle.loads(pickle.dumps(frozen))
    assert back == frozen and len(back) == 3 and back.high(3) >= 0.3


def _capture(role: str, ttft: float) -> Capture:
    return Capture(role=role, backend=role, status=200, ttft_s=ttft, itl_s=(0.01,) * 9,
                   e2e_s=ttft + 0.09, output_tokens=10, finish_reason="length", text="",
                   token_ids=None)


def _identical(count: int, seed: int) -> list[ExchangeRecord]:
    """Old, new and baseline alike: TTFT lognormal with a heavy tail (sigma 0.9)."""
    rng = random.Random(seed)
    meta = RequestMeta("completions", True, True, "ab" * 32, 5, 10)
    records = []
    for i in range(count):
        caps = tuple(_capture(role, rng.lognormvariate(math.log(0.05), 0.9))
                     for role in ("primary", "shadow", "baseline"))
        comps = tuple(Comparison(side, "match", True, None, 0, 0, True, None)
                      for side in ("shadow", "baseline"))
        records.append(ExchangeRecord(f"r{i}", 1000.0 + i, meta, caps, comps))
    return records


def _ttft_p99(inputs: GateInputs) -> dict[str, object]:
    facts = evaluate(inputs, GateCriteria()).details["latency"]["ratios"]["max_ttft_p99_ratio"]
    assert isinstance(facts, dict)
    return facts


def test_beyond_the_window_a_p99_bound_keeps_tightening() -> None:
    """With the same 20,000 identical records, the bounds judged on every sample are
    narrower than those of the newest 5,000 (what the gate judged before), and they
    count every record."""
    records = _identical(4 * LATENCY_WINDOW, seed=3)
    # the two-bound check (what a source without pairs gets) on both sides of the question
    whole = replace(GateInputs.from_records(records), pair_tails={})
    windowed = GateInputs(whole.new_vs_old, whole.baseline_vs_old, whole.latency,
                          whole.requests, whole.errors, None, whole.pairs)
    all_facts, window_facts = _ttft_p99(whole), _ttft_p99(windowed)
    assert all_facts["new_n"] == all_facts["old_n"] == 4 * LATENCY_WINDOW
    assert window_facts["new_n"] == LATENCY_WINDOW

    def width(facts: dict[str, object]) -> float:
        new, old = facts["new"], facts["old"]
        assert isinstance(new, list) and isinstance(old, list)
        return float(new[1]) / float(old[0]) - float(new[0]) / float(old[1])

    assert width(all_facts) < 0.6 * width(window_facts), (all_facts, window_facts)


def test_the_bucketed_check_never_decides_where_the_exact_one_would_not() -> None:
    """Bounds read off buckets contain the exact samples' bounds: a pass (or fail) on the
    sketch is one on the exact samples too, at every sample size tried."""
    from proxy.gate.latency_checks import _bounds

    rng = random.Random(4)
    values = [rng.lognormvariate(-3, 0.9) for _ in range(8000)]
    for n in (300, 1000, 3000, 8000):
        sketch = LogHistogram()
        sketch.add(values[:n])
        exact = SortedSample.of(values[:n])
        for alpha in (0.025, 0.0025):
            low_s, high_s = _bounds(sketch, 0.99, alpha, n)
            low_e, high_e = _bounds(exact, 0.99, alpha, n)
            if low_e is not None:
                assert low_s is not None and low_s <= low_e <= low_s * (1 + WIDTH)
            if high_e is not None:
                assert high_s is not None and high_e <= high_s <= high_e * (1 + WIDTH)


def test_the_store_grows_its_tails_look_by_look_as_records_give_them(tmp_path: Path) -> None:
    """Aggregates read between writes (the live gate) give the same tails as one read of
    the whole file and as the records themselves: in a cutover's window too, by version."""
    from proxy.evidence.window import EvidenceWindow

    store = SqliteStore(str(tmp_path / "r.db"))
    rng = random.Random(5)
    window = EvidenceWindow(1000.0, OLD, NEW, BASE)
    written = []
    for batch in range(6):
        rows = [record(1000.0 + 100 * batch + i, OLD, NEW, baseline=BASE,
                       ttft={OLD: rng.uniform(0.05, 0.2), NEW: rng.uniform(0.05, 0.2),
                             BASE: rng.uniform(0.05, 0.2)}) for i in range(50)]
        store.write(rows)
        written += rows
        live = store.aggregates(latency_window=60, window=window)
    assert {role: {m: len(h) for m, h in of.items()} for role, of in live.tails.items()} == {
        role: {"ttft": 300, "tpot": 300} for role in ("primary", "shadow", "baseline")}
    fresh = SqliteStore(str(tmp_path / "r.db"), readonly=True)
    assert fresh.aggregates(latency_window=60, window=window).tails == live.tails
    assert GateInputs.from_records(written).tails == live.tails
    # the gate reads them: its p99 counts all 300, not the 60 of the latency window
    facts = _ttft_p99(live.gate_inputs())
    assert facts["new_n"] == 300 and facts["old_n"] == 300
