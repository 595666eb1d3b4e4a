"""SQLite records: round trip, no text by default, retention, restart, aggregates."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from proxy.capture.types import Capture, RequestMeta, Role
from proxy.compare.types import Comparison, ExchangeRecord
from proxy.evidence.store import RecordStore, SqliteStore


def _capture(role: Role, text: str = "secret completion", **kw: Any) -> Capture:
    base = Capture(role=role, backend="h:1", status=200, ttft_s=0.1, itl_s=(0.01, 0.02),
                   e2e_s=0.5, output_tokens=3, finish_reason="stop", text=text,
                   token_ids=(1, 2, 3))
    return replace(base, **kw)


def _record(i: int, outcome: str = "match", deterministic: bool = True,
            baseline: bool = False, stream: bool = True) -> ExchangeRecord:
    meta = RequestMeta(endpoint="chat", stream=stream, deterministic=deterministic,
                       prompt_sha256="ab" * 32, prompt_chars=12, max_tokens=16, logprobs_k=5)
    comparisons = [Comparison("shadow", outcome, outcome == "match",
                              None if outcome == "match" else 2, 0 if outcome == "match" else 1,
                              0, True, False if outcome == "diverged" else None)]
    captures = [_capture("primary"), _capture("shadow", ttft_s=0.2)]
    if baseline:
        comparisons.append(Comparison("baseline", "match", True, None, 0, 0, True, None))
        captures.append(_capture("baseline"))
    return ExchangeRecord(f"r{i}", 1000.0 + i, meta, tuple(captures), tuple(comparisons),
                          token_ids_source="tokenize")


def test_round_trip_without_text(tmp_path):
    store = SqliteStore(str(tmp_path / "r.db"))
    original = _record(1, "diverged")
    store.write([original])
    (back,) = list(store.records())
    # The prompt's hash is kept keyed (tests/evidence/test_store_hashing.py), the rest as it was.
    assert back.meta == replace(original.meta, prompt_sha256=back.meta.prompt_sha256)
    assert back.comparisons == original.comparisons
    assert back.token_ids_source == "tokenize"
    assert back.stored is not None and back.stored.row_id == 1
    digest = back.stored.text("primary")
    assert digest is not None and digest.chars == len("secret completion")
    primary = back.captures[0]
    assert primary.text == "" and primary.token_ids is None
    assert primary.itl_s == (0.009999999776482582, 0.019999999552965164)  # float32 on disk
    assert primary.ttft_s == 0.1 and primary.finish_reason == "stop"
    raw = (tmp_path / "r.db").read_bytes()
    assert b"secret completion" not in raw


def test_store_text_keeps_text_and_ids(tmp_path):
    store = SqliteStore(str(tmp_path / "r.db"), store_text=True)
    store.write([_record(1)])
    (back,) = list(store.records())
    assert back.captures[0].text == "secret completion"
    assert back.captures[0].token_ids == (1, 2, 3)


def test_retention_and_restart(tmp_path):
    path = str(tmp_path / "r.db")
    store = SqliteStore(path, retention_rows=5)
    for i in range(8):
        store.write([_record(i)])
    assert [r.request_id for r in store.records()] == ["r3", "r4", "r5", "r6", "r7"]
    store.close()
    again = SqliteStore(path, retention_rows=5)
    again.write([_record(8)])
    assert [r.request_id for r in again.records()] == ["r4", "r5", "r6", "r7", "r8"]
    assert [r.request_id for r in again.records(after_id=6, limit=1)] == ["r6"]  # r6 has row id 7
    again.close()
    readonly = SqliteStore(path, readonly=True)
    assert readonly.count() == 5


def test_aggregates(tmp_path):
    store = SqliteStore(str(tmp_path / "r.db"))
    store.write([_record(1), _record(2, "diverged", baseline=True), _record(3, "error"),
                 _record(4, deterministic=False)])
    agg = store.aggregates()
    assert agg.records == 4
    assert (agg.shadow.compared, agg.shadow.diverged, agg.shadow.errors) == (2, 1, 1)
    assert agg.shadow.sampled == 1 and agg.shadow.first_divergence == (2,)
    assert agg.baseline is not None and agg.baseline.compared == 1
    assert len(agg.latency["shadow"].ttft_s) == 4
    assert abs(agg.latency["primary"].tpot_s[0] - 0.2) < 1e-9
    assert agg.roles["primary"].requests == 4
    assert agg.as_json()["baseline"]["compared"] == 1
    assert SqliteStore(":memory:").aggregates().baseline is None


async def test_async_writer_flushes_and_closes(tmp_path):
    path = str(tmp_path / "r.db")
    drops: list[int] = []
    store = RecordStore(SqliteStore(path), queue_size=4, on_drop=lambda reason, n: drops.extend([1] * n))
    store.start()
    accepted = sum(store.put(_record(i)) for i in range(10))  # no await: the queue fills
    assert accepted == 4 and len(drops) == 6
    await store.flush()
    assert await store.call(SqliteStore.count) == 4
    store.put(_record(99))
    await store.close()
    assert SqliteStore(path).count() == 5
    await asyncio.sleep(0)


async def test_settle_waits_for_the_records_queued_before_not_after(tmp_path):
    """A gate look takes its cutoff, then waits for the records queued before it (an
    exchange stops holding the cutoff when its record is queued, not written)."""
    store = RecordStore(SqliteStore(str(tmp_path / "r.db")), linger_s=0.2)
    store.start()
    for i in range(3):
        store.put(_record(i))
    accepted = store.accepted
    assert accepted == 3 and store.settled == 0
    assert await store.settle(accepted, timeout_s=5.0)
    assert await store.call(SqliteStore.count) >= 3
    store.put(_record(50))  # queued after: not waited for
    assert await store.settle(accepted, timeout_s=0.0)
    assert not await store.settle(store.accepted, timeout_s=0.0)  # still lingering
    await store.close()
    assert store.settled == store.accepted == 4


async def test_settle_does_not_wait_for_a_writer_that_is_not_running(tmp_path):
    store = RecordStore(SqliteStore(str(tmp_path / "r.db")))
    store.put(_record(1))  # never started: nothing will write it
    started = time.monotonic()
    assert not await store.settle(store.accepted, timeout_s=5.0)
    assert time.monotonic() - started < 1.0


def test_gate_inputs_from_aggregates(tmp_path):
    store = SqliteStore(str(tmp_path / "r.db"))
    store.write([_record(1), _record(2, "diverged", baseline=True)])
    inputs = store.aggregates().gate_inputs()
    assert (inputs.new_vs_old.compared, inputs.new_vs_old.diverged) == (2, 1)
    assert inputs.baseline_vs_old is not None and inputs.baseline_vs_old.compared == 1
    assert inputs.requests == {"primary": 2, "shadow": 2, "baseline": 1}
    assert inputs.latency["primary"].ttft_s == (0.1, 0.1)


def test_per_token_latency_only_from_streamed_answers(tmp_path):
    """Streamed answers give TTFT/TPOT/E2E, unstreamed ones E2E and E2E per completion
    token: never pooled. A baseline asked unstreamed for a streamed request gives neither
    (its E2E is of streamed traffic: `tally.latency_kind`)."""
    store = SqliteStore(str(tmp_path / "r.db"))
    unstreamed_baseline = replace(_record(2, baseline=True), baseline_streamed=False)
    store.write([_record(1, stream=False), unstreamed_baseline])
    latency = store.aggregates().latency
    assert (len(latency["primary"].ttft_s), len(latency["primary"].e2e_s)) == (1, 1)
    assert len(latency["primary"].tpot_s) == 1
    assert latency["primary"].e2e_unstreamed_s == (0.5,)
    assert latency["primary"].tpot_unstreamed_s == (0.5 / 3,)
    assert "baseline" not in latency or latency["baseline"].e2e_unstreamed_s == ()
    assert latency["shadow"].ttft_s != ()  # the same record's streamed shadow counts
    counts = store.aggregates().as_json()["latency_samples"]
    assert counts["primary"]["e2e_unstreamed"] == 1 and counts["primary"]["e2e"] == 1


def test_stored_latency_samples_equal_the_records_own(tmp_path):
    """The SQL aggregation and `GateInputs.from_records` (Python over the same records)
    give the same samples, per role and metric, for a mix of streamed and unstreamed."""
    from proxy.gate.tally import GateInputs

    records = []
    for i in range(24):
        record = _record(i, baseline=i % 3 == 0, stream=i % 2 == 0)
        e2e = 0.3 + i / 100
        captures = tuple(replace(c, e2e_s=e2e * (1.5 if c.role == "shadow" else 1),
                                 output_tokens=1 + i % 5) for c in record.captures)
        records.append(replace(record, captures=captures, baseline_streamed=i % 4 != 0))
    store = SqliteStore(str(tmp_path / "r.db"))
    store.write(records)
    stored = store.aggregates().latency
    direct = GateInputs.from_records(records).latency
    assert set(stored) == set(direct) == {"primary", "shadow", "baseline"}
    for role in direct:
        for name in ("ttft", "tpot", "e2e", "e2e_unstreamed", "tpot_unstreamed"):
            got, want = sorted(stored[role].metric(name)), sorted(direct[role].metric(name))
            assert got == want, (role, name)
    assert len(stored["primary"].e2e_unstreamed_s) == 12


def test_admission_counts_add_up_reach_the_gate_and_follow_retention(tmp_path):
    path = str(tmp_path / "r.db")
    store = SqliteStore(path, retention_rows=2)
    store.add_admission(999.0, [("http://a", "http://b", "eligible", 5),
                                ("http://a", "http://b", "overload", 2)])
    store.add_admission(1001.5, [("http://a", "http://b", "eligible", 3),
                                 ("http://a", "http://b", "worker_busy", 1)])
    agg = store.aggregates()
    assert agg.admission is not None
    assert (agg.admission.eligible, dict(agg.admission.shed)) == (8, {"overload": 2,
                                                                      "worker_busy": 1})
    assert agg.gate_inputs().admission == agg.admission
    assert agg.as_json()["admission"]["drop_rate"] == 3 / 8
    # Records 1..3 with retention 2: record 1 (t=1001) goes, and the counts from before
    # the oldest kept record (t=1002) with it: coverage spans what the records span.
    store.write([_record(1), _record(2), _record(3)])
    admission = store.admission()
    assert admission is not None and admission.eligible == 0
    store.close()


def test_a_store_from_before_admission_counts_reads_as_uncounted(tmp_path):
    path = str(tmp_path / "old.db")
    SqliteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE admission")
    readonly = SqliteStore(path, readonly=True)
    assert readonly.admission() is None
    assert readonly.aggregates().gate_inputs().admission is None


async def test_admission_counts_are_written_before_a_later_read(tmp_path):
    store = RecordStore(SqliteStore(str(tmp_path / "r.db")))
    store.start()
    store.add_admission(1.0, [("http://a", "http://b", "eligible", 4)])
    admission = await store.call(SqliteStore.admission)
    assert admission is not None and admission.eligible == 4
    await store.close()
    store.add_admission(2.0, [("http://a", "http://b", "eligible", 1)])  # closed: logged only


# The tables as stores wrote them before records had typed fields (what the gate and the
# report read sat in one JSON column) and before comparisons named their field.
_OLD_SCHEMA = """CREATE TABLE exchange (
    id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, started_unix REAL NOT NULL,
    endpoint TEXT NOT NULL, stream INTEGER NOT NULL, deterministic INTEGER NOT NULL,
    prompt_sha256 TEXT NOT NULL, prompt_chars INTEGER NOT NULL, max_tokens INTEGER,
    n INTEGER NOT NULL, logprobs_k INTEGER, extra TEXT NOT NULL);
CREATE TABLE capture (
    exchange_id INTEGER NOT NULL, role TEXT NOT NULL, backend TEXT NOT NULL, status INTEGER,
    ttft_s REAL, e2e_s REAL, itl_s BLOB, output_tokens INTEGER, finish_reason TEXT,
    text_sha256 TEXT NOT NULL, text_chars INTEGER NOT NULL, text TEXT, token_ids BLOB,
    error TEXT, cancelled INTEGER NOT NULL, PRIMARY KEY (exchange_id, role));
CREATE TABLE comparison (
    exchange_id INTEGER NOT NULL, against TEXT NOT NULL, outcome TEXT NOT NULL,
    exact_match INTEGER NOT NULL, first_divergence INTEGER, edit_distance INTEGER,
    length_delta INTEGER, finish_reason_match INTEGER, close_match INTEGER, reason TEXT NOT NULL,
    basis TEXT NOT NULL, PRIMARY KEY (exchange_id, against));"""


def _old_database(path: str) -> None:
    with sqlite3.connect(path) as db:
        db.executescript(_OLD_SCHEMA)
        said = {"token_ids_source": "tokenize", "route_version": 3, "baseline_streamed": False,
                "request": '{"prompt": "hi"}',
                "urls": {"primary": "http://old:8000", "shadow": "http://new:8000",
                         "baseline": "http://base:8000"}}
        rows = [(1, json.dumps(said)), (2, "{}")]  # the second older still: nothing said
        for row_id, extra in rows:
            db.execute("INSERT INTO exchange VALUES (?, ?, ?, 'chat', 1, 1, ?, 5, 16, 1, NULL, ?)",
                       (row_id, f"r{row_id}", 1000.0 + row_id, "ab" * 32, extra))


def _said(record: ExchangeRecord) -> tuple[Any, ...]:
    return (record.token_ids_source, record.routes, record.baseline_streamed,
            record.request_json)


def test_an_older_database_is_read_and_migrated_to_typed_columns(tmp_path):
    """A database whose records kept their routes, token source, baseline streaming and
    request in a JSON column: read as it is (read-only, through a copy: the file is not
    touched), and opened for writing it gets the columns, filled, and loses the JSON."""
    from proxy.compare.types import RouteStamp

    path = str(tmp_path / "old.db")
    _old_database(path)
    said = ("tokenize", RouteStamp(3, "http://old:8000", "http://new:8000", "http://base:8000"),
            False, '{"prompt": "hi"}')
    unsaid = (None, None, True, None)
    before = Path(path).read_bytes()
    view = SqliteStore(path, readonly=True)
    assert [_said(r) for r in view.records()] == [said, unsaid]
    view.close()
    assert Path(path).read_bytes() == before
    store = SqliteStore(path)
    store.write([_record(3, baseline=True)])
    assert [_said(r) for r in store.records()][:2] == [said, unsaid]
    store.close()
    with sqlite3.connect(path) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(exchange)")}
        urls = db.execute("SELECT url_primary, url_shadow, url_baseline FROM exchange"
                          " WHERE id = 1").fetchone()
    assert "extra" not in columns and urls == ("http://old:8000", "http://new:8000",
                                               "http://base:8000")


def test_a_request_is_stored_only_where_text_is_kept(tmp_path):
    """A record carrying the client's body is written without it by a store that keeps no
    text (the body is prompt text)."""
    record = replace(_record(1), request_json='{"prompt": "secret"}')
    for keep in (False, True):
        store = SqliteStore(str(tmp_path / f"{keep}.db"), store_text=keep)
        store.write([record])
        (back,) = store.records()
        assert back.request_json == (record.request_json if keep else None)
        store.close()


def test_a_kept_json_column_is_never_copied_over_the_typed_columns_again(tmp_path):
    """Where SQLite could not drop the old JSON column (before 3.35), rows written since
    hold {} in it and their facts in the columns: opening the store again (read-only or
    for writing) keeps those facts, and copies only rows whose JSON still holds some."""
    from proxy.compare.types import RouteStamp

    path = str(tmp_path / "kept.db")
    store = SqliteStore(path)
    written = replace(_record(1), routes=RouteStamp(2, "http://old:8000", "http://new:8000"),
                      baseline_streamed=False)
    store.write([written])
    store.close()
    with sqlite3.connect(path) as db:  # as SQLite before 3.35 leaves it, one legacy row more
        db.execute("ALTER TABLE exchange ADD COLUMN extra TEXT NOT NULL DEFAULT '{}'")
        db.execute("INSERT INTO exchange (request_id, started_unix, endpoint, stream,"
                   " deterministic, prompt_sha256, prompt_chars, max_tokens, n, extra)"
                   " VALUES ('r2', 1002.0, 'chat', 1, 1, ?, 5, 16, 1, ?)",
                   ("ab" * 32, json.dumps({"route_version": 3, "urls": {
                       "primary": "http://old:8000", "shadow": "http://new:8000"}})))
    legacy = (None, RouteStamp(3, "http://old:8000", "http://new:8000"), True, None)
    for readonly in (True, False, True):
        view = SqliteStore(path, readonly=readonly)
        assert [_said(r) for r in view.records()] == [_said(written), legacy], readonly
        view.close()
