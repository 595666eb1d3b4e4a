"""One meaning of `GateInputs`: the store's aggregates and `GateInputs.from_records` give
the same inputs from the same records (counts, close matches, samples, lengths, pairs).

The records are varied on purpose: streamed and unstreamed, a baseline asked streamed or
not, errors, HTTP failures, cancellations, missing token counts, close divergences, and
exchanges without a shadow or a baseline (the error pairs need both old and new). Before
the fold was shared, the store dropped `close` and every output length (the live gate
skipped its length check).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from proxy.capture.types import Capture, RequestMeta, Role
from proxy.compare.types import Comparison, ExchangeRecord, RouteStamp
from proxy.evidence.store import SqliteStore
from proxy.evidence.window import EvidenceWindow
from proxy.gate.tally import GateInputs


def _capture(rng: random.Random, role: Role, stream: bool) -> Capture:
    fate = rng.random()
    error = "timeout" if fate < 0.05 else None
    status = None if error else (503 if fate < 0.08 else 200)
    tokens = None if rng.random() < 0.05 else rng.randint(1, 40)
    ttft = rng.lognormvariate(-3, 0.5)
    e2e = ttft + (tokens or 1) * rng.lognormvariate(-4, 0.3)
    itl = tuple(round(rng.uniform(0.001, 0.05), 4) for _ in range(max(0, (tokens or 1) - 1))) \
        if stream else ()
    return Capture(role=role, backend=role, status=status, ttft_s=ttft if stream else e2e,
                   itl_s=itl, e2e_s=None if error else e2e, output_tokens=tokens,
                   finish_reason="length", text="", token_ids=None, error=error,
                   cancelled=fate > 0.97)


def _comparison(rng: random.Random, against: Role) -> Comparison:
    outcome = rng.choice(["match"] * 6 + ["diverged"] * 3 + ["not_comparable", "error"])
    close = rng.random() < 0.5 if outcome == "diverged" else None
    return Comparison(against, outcome, outcome == "match",  # type: ignore[arg-type]
                      3 if outcome == "diverged" else None, None, 0, True, close)


def varied_records(seed: int, n: int) -> list[ExchangeRecord]:
    rng = random.Random(seed)
    records = []
    for i in range(n):
        stream = rng.random() < 0.7
        roles: list[Role] = ["primary"]
        if rng.random() < 0.9:
            roles.append("shadow")
        if rng.random() < 0.6:
            roles.append("baseline")
        meta = RequestMeta(endpoint="chat", stream=stream, deterministic=rng.random() < 0.8,
                           prompt_sha256=f"{i:064x}", prompt_chars=10, max_tokens=40)
        baseline_streamed = "baseline" not in roles or rng.random() < 0.5
        records.append(ExchangeRecord(
            request_id=f"r{i}", started_unix=1000.0 + i, meta=meta,
            captures=tuple(_capture(rng, role, stream) for role in roles),
            comparisons=tuple(_comparison(rng, role) for role in roles[1:]),
            baseline_streamed=baseline_streamed))
    return records


def _normal(inputs: GateInputs) -> GateInputs:
    """Drop what only the store counts (admission) and zero-request roles."""
    return replace(inputs, admission=None,
                   requests={k: v for k, v in inputs.requests.items() if v},
                   errors={k: v for k, v in inputs.errors.items() if inputs.requests.get(k)})


@pytest.mark.parametrize("seed", range(4))
def test_store_and_memory_build_the_same_gate_inputs(tmp_path, seed) -> None:
    records = varied_records(seed, 300)
    store = SqliteStore(str(tmp_path / "records.db"))
    try:
        store.write(records)
        from_store = store.aggregates().gate_inputs()
    finally:
        store.close()
    from_memory = GateInputs.from_records(records)
    assert _normal(from_store) == _normal(from_memory)
    # the live gate's lengths and the pairs are there, not silently empty
    assert from_store.pairs["output_tokens"].new
    assert from_store.pairs["ttft"].basis == "capture worker"
    assert from_store.new_vs_old.close > 0
    # the paired p99 checks' pairs are there (equal above), at most one per request timed
    # on both sides
    paired = len(from_store.pair_tails["ttft"])
    assert 0 < paired <= min(len(from_store.tails[role]["ttft"]) for role in ("baseline", "shadow"))
    pairs = from_store.error_pairs
    assert pairs is not None and pairs == from_memory.error_pairs
    assert pairs.new_only > 0 and pairs.old_only > 0


def test_the_latency_window_means_the_same_records(tmp_path) -> None:
    records = varied_records(9, 120)
    store = SqliteStore(str(tmp_path / "records.db"))
    try:
        store.write(records)
        from_store = store.aggregates(latency_window=50).gate_inputs()
    finally:
        store.close()
    assert _normal(from_store) == _normal(GateInputs.from_records(records, latency_window=50))


OLD, NEW, BASE = "http://old:8000", "http://new:8000", "http://base:8000"


@pytest.mark.parametrize("seed", range(3))
def test_a_cutoff_on_start_times_judges_the_same_records_look_after_look(tmp_path,
                                                                         seed) -> None:
    """Records are written in the order exchanges end; a cutover's gate judges only those
    started before the oldest exchange still out (`Mirror.judged_until`). Look after look,
    as the cutoff moves on and records come in out of start order, the store's window
    aggregates (its quantile samples grown incrementally) must equal a fresh fold of
    exactly the records written and started before the cutoff."""
    rng = random.Random(seed)
    records = []
    for record in varied_records(seed, 400):
        baseline = BASE if any(c.role == "baseline" for c in record.captures) else None
        records.append(replace(record, routes=RouteStamp(1, OLD, NEW, baseline)))
    # Each ends after a random time; now and then one hangs (a shadow held to its timeout).
    ends = [r.started_unix + (rng.uniform(60, 120) if rng.random() < 0.05
                              else rng.uniform(0.1, 5)) for r in records]
    order = sorted(range(len(records)), key=lambda i: ends[i])
    window = EvidenceWindow(0.0, OLD, NEW, BASE)
    store = SqliteStore(str(tmp_path / "records.db"))
    written: list[ExchangeRecord] = []
    looks = held_back = 0
    try:
        at = 0
        while at < len(order):
            batch = order[at:at + rng.randint(1, 25)]
            at += len(batch)
            store.write([records[i] for i in batch])
            written += [records[i] for i in batch]
            now = ends[batch[-1]]
            still_out = [records[i].started_unix for i in order[at:]
                         if records[i].started_unix <= now]
            until = min(still_out, default=now)
            judged = [r for r in written if r.started_unix < until]
            expected = _normal(GateInputs.from_records(judged))
            store.aggregates()  # /admin/stats reads without a cutoff: not into the gate's
            got = store.aggregates(window=window, until_unix=until).gate_inputs()
            assert _normal(got) == expected, (at, until)
            everything = store.aggregates(until_unix=until).gate_inputs()  # no cutover
            assert _normal(everything) == expected, (at, until)
            looks += 1
            held_back += len(written) > len(judged)
    finally:
        store.close()
    assert looks > 20 and held_back > 10, (looks, held_back)  # records written, not judged yet
