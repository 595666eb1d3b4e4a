"""SQLite records of mirrored exchanges: a synchronous core plus an async single-writer front.

`SqliteStore` is plain sqlite3 (the report and tests use it directly); the proxy
uses `RecordStore`, which queues records and writes them in batches from one
worker thread, so the event loop never waits on the disk. Prompt and completion
text are kept only when `store_text` is on; otherwise hashes, lengths and
positions. The oldest rows beyond `retention_rows` are deleted. The `admission` table
counts the requests the proxy sampled and those it shed unmirrored (per reason), so the
gate and the report know what share of the traffic the records stand for.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from typing import Any, Literal, TypeVar

from proxy.capture.types import Capture, RequestMeta, Role
from proxy.compare.types import Comparison, ExchangeRecord, RouteStamp, Stored, TextDigest
from proxy.evidence.aggregates import (
    PairCounts,
    PairSeen,
    RoleCounts,
    StoreAggregates,
    TailState,
    backend_pairs,
    query_aggregates,
    window_members,
)
from proxy.evidence.record_hash import META_TABLE, RecordHasher
from proxy.evidence.window import EvidenceWindow
from proxy.gate.stats import LatencySamples
from proxy.gate.tally import LATENCY_WINDOW, AdmissionRow
from proxy.gate.verdict import AdmissionCounts
from proxy.tasks import start_task

TAIL_SCOPES = 8  # cutover windows (and the whole store), with a cutoff or without, whose
# quantile samples are kept

__all__ = ["LatencySamples", "PairCounts", "RecordStore", "RoleCounts", "SqliteStore",
           "StoreAggregates"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS exchange (
    id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, started_unix REAL NOT NULL,
    endpoint TEXT NOT NULL, stream INTEGER NOT NULL, deterministic INTEGER NOT NULL,
    prompt_sha256 TEXT NOT NULL, prompt_chars INTEGER NOT NULL, max_tokens INTEGER,
    n INTEGER NOT NULL, logprobs_k INTEGER, token_ids_source TEXT, route_version INTEGER,
    baseline_streamed INTEGER NOT NULL DEFAULT 1, url_primary TEXT, url_shadow TEXT,
    url_baseline TEXT, request TEXT);
CREATE TABLE IF NOT EXISTS capture (
    exchange_id INTEGER NOT NULL, role TEXT NOT NULL, backend TEXT NOT NULL, status INTEGER,
    ttft_s REAL, e2e_s REAL, itl_s BLOB, output_tokens INTEGER, finish_reason TEXT,
    text_sha256 TEXT NOT NULL, text_chars INTEGER NOT NULL, text TEXT, token_ids BLOB,
    error TEXT, cancelled INTEGER NOT NULL, PRIMARY KEY (exchange_id, role));
CREATE TABLE IF NOT EXISTS comparison (
    exchange_id INTEGER NOT NULL, against TEXT NOT NULL, outcome TEXT NOT NULL,
    exact_match INTEGER NOT NULL, first_divergence INTEGER, edit_distance INTEGER,
    length_delta INTEGER, finish_reason_match INTEGER, close_match INTEGER, reason TEXT NOT NULL,
    basis TEXT NOT NULL, PRIMARY KEY (exchange_id, against));
CREATE INDEX IF NOT EXISTS exchange_started ON exchange (started_unix);
CREATE TABLE IF NOT EXISTS admission (
    t_unix REAL NOT NULL, primary_url TEXT NOT NULL, shadow_url TEXT NOT NULL,
    outcome TEXT NOT NULL, count INTEGER NOT NULL);
"""


# Added columns (issue 22: which field diverged first, in which choice), appended to tables
# of older databases on open.
_FIELD_COLUMNS = (("comparison", "field", "TEXT"), ("comparison", "choice", "INTEGER"))
# What records once kept in a JSON column `extra`, now columns of their own: a database
# written before gets them on open, filled from its JSON, and loses the JSON column.
_RECORD_COLUMNS = (
    ("exchange", "token_ids_source", "TEXT"), ("exchange", "route_version", "INTEGER"),
    ("exchange", "baseline_streamed", "INTEGER NOT NULL DEFAULT 1"),
    ("exchange", "url_primary", "TEXT"), ("exchange", "url_shadow", "TEXT"),
    ("exchange", "url_baseline", "TEXT"), ("exchange", "request", "TEXT"))
_FROM_EXTRA = """UPDATE exchange SET
    token_ids_source = json_extract(extra, '$.token_ids_source'),
    route_version = json_extract(extra, '$.route_version'),
    baseline_streamed = COALESCE(json_extract(extra, '$.baseline_streamed'), 1),
    url_primary = json_extract(extra, '$.urls.primary'),
    url_shadow = json_extract(extra, '$.urls.shadow'),
    url_baseline = json_extract(extra, '$.urls.baseline'),
    request = json_extract(extra, '$.request')"""
_EXCHANGE_COLUMNS = ("id, request_id, started_unix, endpoint, stream, deterministic,"
                     " prompt_sha256, prompt_chars, max_tokens, n, logprobs_k, token_ids_source,"
                     " route_version, baseline_streamed, url_primary, url_shadow, url_baseline,"
                     " request")


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _add_columns(db: sqlite3.Connection, columns: Sequence[tuple[str, str, str]]) -> None:
    for table, name, kind in columns:
        if name not in _columns(db, table):
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


def _migrate(db: sqlite3.Connection) -> None:
    """An older database brought to this schema (a no-op on a current one). Rows whose
    JSON still holds something are copied into the columns and their JSON emptied, in one
    transaction: a row is copied once, never over what was written to its columns since."""
    with db:
        _add_columns(db, _FIELD_COLUMNS + _RECORD_COLUMNS)
        if "extra" not in _columns(db, "exchange"):
            return
        db.execute(_FROM_EXTRA + " WHERE extra <> '{}'")
        db.execute("UPDATE exchange SET extra = '{}' WHERE extra <> '{}'")
        try:
            db.execute("ALTER TABLE exchange DROP COLUMN extra")
        except sqlite3.OperationalError as exc:
            if "syntax error" not in str(exc):  # SQLite before 3.35: kept, written as {}
                raise


def _needs_migration(db: sqlite3.Connection) -> bool:
    """Whether reading this database needs `_migrate` first: a column missing, or a row
    whose JSON was never copied into the columns."""
    have = {table: _columns(db, table) for table in ("exchange", "comparison")}
    if not have["exchange"]:
        return False
    if any(name not in have[table] for table, name, _ in _FIELD_COLUMNS + _RECORD_COLUMNS):
        return True
    return "extra" in have["exchange"] and db.execute(
        "SELECT 1 FROM exchange WHERE extra <> '{}' LIMIT 1").fetchone() is not None


def _admission_where(window: EvidenceWindow | None) -> tuple[str, tuple[Any, ...]]:
    """The admission rows of a cutover's `window`: counted at or after its start between
    exactly its old and new URLs, either way round (all rows without one)."""
    if window is None:
        return "", ()
    old, new = window.old_url, window.new_url
    where = (" WHERE t_unix >= ? AND ((primary_url = ? AND shadow_url = ?)"
             " OR (primary_url = ? AND shadow_url = ?))")
    return where, (window.since_unix, old, new, new, old)


def _opt_bool(value: bool | None) -> int | None:
    return None if value is None else int(value)


def _from_opt_bool(value: int | None) -> bool | None:
    return None if value is None else bool(value)


class SqliteStore:
    """Synchronous access to the records database (one thread at a time)."""

    def __init__(self, path: str, retention_rows: int = 100_000, store_text: bool = False,
                 readonly: bool = False) -> None:
        self.path = path
        self.retention_rows = retention_rows
        self.store_text = store_text
        self.readonly = readonly and path != ":memory:"
        if self.readonly:
            self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            if _needs_migration(self._db):  # read an older database through a copy in memory
                copy = sqlite3.connect(":memory:", check_same_thread=False)
                self._db.backup(copy)
                self._db.close()
                self._db = copy
                _migrate(self._db)
        else:
            self._db = sqlite3.connect(path, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA + META_TABLE)
            _migrate(self._db)
        self._legacy_extra = "extra" in _columns(self._db, "exchange")
        # Hashes of prompts and completions: keyed per database (proxy.evidence.record_hash).
        self.hasher = RecordHasher.open(self._db, writable=not self.readonly)
        # The quantile samples of the scopes asked for lately, grown look by look (bounded:
        # a few scopes, each a few thousand bucket counts).
        # By scope and whether a cutoff applies: a read without one (/admin/stats) grows
        # its samples past records a cutoff still holds back.
        self._tails: OrderedDict[tuple[EvidenceWindow | None, bool], TailState] = \
            OrderedDict()

    def close(self) -> None:
        self._db.close()

    def write(self, records: Sequence[ExchangeRecord]) -> None:
        """Insert `records` in one transaction, then apply the retention bound."""
        with self._db:
            for record in records:
                self._insert(record)
            self._prune()

    def _insert(self, record: ExchangeRecord) -> None:
        meta = record.meta
        routes = record.routes
        values: list[Any] = [record.request_id, record.started_unix, meta.endpoint, int(meta.stream),
                  int(meta.deterministic), self.hasher.prompt(meta.prompt_sha256),
                  meta.prompt_chars, meta.max_tokens, meta.n, meta.logprobs_k,
                  record.token_ids_source, routes.version if routes else None,
                  int(record.baseline_streamed), routes.primary if routes else None,
                  routes.shadow if routes else None, routes.baseline if routes else None,
                  record.request_json if self.store_text else None]  # text only if kept
        names = _EXCHANGE_COLUMNS.split(", ", 1)[1] + (", extra" if self._legacy_extra else "")
        if self._legacy_extra:
            values.append("{}")
        cur = self._db.execute(f"INSERT INTO exchange ({names}) VALUES"
                               f" ({','.join('?' * len(values))})", values)
        exchange_id = cur.lastrowid
        self._db.executemany(
            "INSERT INTO capture VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [self._capture_row(exchange_id, c) for c in record.captures])
        self._db.executemany(
            "INSERT INTO comparison (exchange_id, against, outcome, exact_match,"
            " first_divergence, edit_distance, length_delta, finish_reason_match, close_match,"
            " reason, basis, field, choice) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(exchange_id, c.against, c.outcome, int(c.exact_match), c.first_divergence,
              c.edit_distance, c.length_delta, _opt_bool(c.finish_reason_match),
              _opt_bool(c.close_match), c.reason, c.basis, c.field, c.choice)
             for c in record.comparisons])

    def _capture_row(self, exchange_id: int | None, c: Capture) -> tuple[Any, ...]:
        keep = self.store_text
        token_ids = None
        if keep and c.token_ids is not None:
            token_ids = array("q", c.token_ids).tobytes()
        return (exchange_id, c.role, c.backend, c.status, c.ttft_s, c.e2e_s,
                array("f", c.itl_s).tobytes(), c.output_tokens, c.finish_reason,
                self.hasher.text(c.text), len(c.text),
                c.text if keep else None, token_ids, c.error, int(c.cancelled))

    def _prune(self) -> None:
        row = self._db.execute("SELECT MAX(id) FROM exchange").fetchone()
        if row[0] is None or row[0] <= self.retention_rows:
            return
        cutoff = row[0] - self.retention_rows
        self._db.execute("DELETE FROM exchange WHERE id <= ?", (cutoff,))
        self._db.execute("DELETE FROM capture WHERE exchange_id <= ?", (cutoff,))
        self._db.execute("DELETE FROM comparison WHERE exchange_id <= ?", (cutoff,))
        # Counts from before the oldest kept record: coverage spans what the records span.
        self._db.execute("DELETE FROM admission WHERE t_unix <"
                         " (SELECT MIN(started_unix) FROM exchange)")

    def add_admission(self, t_unix: float, rows: Sequence[AdmissionRow]) -> None:
        """Add the proxy's eligible and shed counts since its last flush (one transaction)."""
        with self._db:
            self._db.executemany("INSERT INTO admission VALUES (?,?,?,?,?)",
                                 [(t_unix, *row) for row in rows])

    def admission(self, window: EvidenceWindow | None = None) -> AdmissionCounts | None:
        """Eligible and shed counts over the kept rows, or a cutover's `window` (counted
        at or after its start between exactly its old and new URLs, either way round);
        None: a store without the table."""
        if self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                            " AND name = 'admission'").fetchone() is None:
            return None
        where, args = _admission_where(window)
        return AdmissionCounts.of(self._db.execute(
            f"SELECT outcome, SUM(count) FROM admission{where} GROUP BY 1", args).fetchall())

    def admission_steps(self, window: EvidenceWindow | None = None,
                        ) -> list[tuple[float, str, int]]:
        """The counts `admission` sums, as flushed: (t_unix, outcome, count), oldest
        first (what the report's verdict over time counts up to each look); [] without
        the table."""
        if self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                            " AND name = 'admission'").fetchone() is None:
            return []
        where, args = _admission_where(window)
        return [(float(t), str(outcome), int(count)) for t, outcome, count in self._db.execute(
            f"SELECT t_unix, outcome, count FROM admission{where} ORDER BY t_unix", args)]

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM exchange").fetchone()[0])

    def records(self, after_id: int = 0, limit: int | None = None,
                batch: int = 500) -> Iterator[ExchangeRecord]:
        """Records in insertion order; `stored.row_id` is the row id (paging with after_id)."""
        left = limit
        while left is None or left > 0:
            size = batch if left is None else min(batch, left)
            rows = self._db.execute(
                f"SELECT {_EXCHANGE_COLUMNS} FROM exchange WHERE id > ? ORDER BY id LIMIT ?",
                (after_id, size)
            ).fetchall()
            if not rows:
                return
            ids = [r[0] for r in rows]
            captures = self._children("capture", ids)
            comparisons = self._children("comparison", ids)
            for row in rows:
                yield self._record(row, captures.get(row[0], []), comparisons.get(row[0], []))
            after_id = ids[-1]
            if left is not None:
                left -= len(rows)

    def _children(self, table: str, ids: list[int]) -> dict[int, list[tuple[Any, ...]]]:
        out: dict[int, list[tuple[Any, ...]]] = {}
        marks = ",".join("?" * len(ids))
        for row in self._db.execute(
                f"SELECT * FROM {table} WHERE exchange_id IN ({marks})", ids):
            out.setdefault(row[0], []).append(row)
        return out

    def _record(self, row: tuple[Any, ...], capture_rows: list[tuple[Any, ...]],
                comparison_rows: list[tuple[Any, ...]]) -> ExchangeRecord:
        (row_id, request_id, started, endpoint, stream, det, sha, chars, max_tokens, n,
         logprobs_k, source, route_version, baseline_streamed, url_primary, url_shadow,
         url_baseline, request) = row
        texts: list[tuple[Role, TextDigest]] = []
        hash_kind = self.hasher.kind(row_id)
        captures = []
        for c in capture_rows:
            itl = array("f")
            itl.frombytes(c[6])
            ids: tuple[int, ...] | None = None
            if c[12] is not None:
                packed = array("q")
                packed.frombytes(c[12])
                ids = tuple(packed)
            texts.append((c[1], TextDigest(hash_kind, c[9], c[10])))
            captures.append(Capture(
                role=c[1], backend=c[2], status=c[3], ttft_s=c[4], itl_s=tuple(itl),
                e2e_s=c[5], output_tokens=c[7], finish_reason=c[8], text=c[11] or "",
                token_ids=ids, error=c[13], cancelled=bool(c[14])))
        comparisons = tuple(Comparison(
            against=c[1], outcome=c[2], exact_match=bool(c[3]), first_divergence=c[4],
            edit_distance=c[5], length_delta=c[6], finish_reason_match=_from_opt_bool(c[7]),
            close_match=_from_opt_bool(c[8]), reason=c[9], basis=c[10],
            field=c[11], choice=c[12]) for c in comparison_rows)
        meta = RequestMeta(endpoint=endpoint, stream=bool(stream), deterministic=bool(det),
                           prompt_sha256=sha, prompt_chars=chars, max_tokens=max_tokens, n=n,
                           logprobs_k=logprobs_k)
        routes = None if route_version is None or url_primary is None else \
            RouteStamp(route_version, url_primary, url_shadow, url_baseline)
        return ExchangeRecord(request_id=request_id, started_unix=started, meta=meta,
                              captures=tuple(captures), comparisons=comparisons,
                              token_ids_source=source, routes=routes,
                              baseline_streamed=bool(baseline_streamed), request_json=request,
                              stored=Stored(row_id, tuple(texts)))

    def aggregates(self, latency_window: int = LATENCY_WINDOW,
                   window: EvidenceWindow | None = None,
                   until_unix: float | None = None) -> StoreAggregates:
        """Counts over all kept rows, or over the cutover evidence `window` (labelled by
        version: see `proxy.evidence.aggregates`), of the records started before `until_unix` when
        given (a cutoff that never moves back from one call to the next); latency samples
        from the newest `latency_window` rows of them."""
        key = (window, until_unix is not None)
        state = self._tails.pop(key, None) or TailState()
        self._tails[key] = state
        while len(self._tails) > TAIL_SCOPES:
            self._tails.popitem(last=False)
        return replace(query_aggregates(self._db, window, latency_window, state, until_unix),
                       admission=self.admission(window))

    def pairs(self) -> list[PairSeen]:
        """Every (primary, shadow) backend pair on record, the newest record's last."""
        return backend_pairs(self._db)

    def window_members(self, window: EvidenceWindow) -> dict[int, tuple[bool, bool]]:
        """Row id -> (promoted, baseline is noise) of each record in `window`."""
        return window_members(self._db, window)


def records_page(store: SqliteStore, after_id: int, limit: int) -> list[dict[str, Any]]:
    """One page of records as JSON-ready dicts (run on the store's thread): each record's
    fields, its row `id` (the next page's `after`) and its answers' digests by role."""
    return [_record_json(r) for r in store.records(after_id=after_id, limit=limit)]


def _record_json(record: ExchangeRecord) -> dict[str, Any]:
    out = asdict(replace(record, stored=None))
    del out["stored"]
    if record.stored is not None:
        out["id"] = record.stored.row_id
        out["texts"] = {role: asdict(digest) for role, digest in record.stored.texts}
    return out


# Why a record (or admission-count rows) was not stored: the writer's queue was full, the
# database refused the write (a full disk, a lost file), admission counts not written.
DropReason = Literal["queue_full", "write_failed", "admission_failed"]


class RecordStore:
    """Async front of `SqliteStore`: a bounded queue drained by one writer task.

    Records are written in batches, at most `linger_s` after they were queued.
    """

    def __init__(self, store: SqliteStore, queue_size: int = 10_000,
                 on_drop: Callable[[DropReason, int], None] | None = None,
                 linger_s: float = 0.25, warn_every_s: float = 60.0) -> None:
        self.sync = store
        self.linger_s = linger_s
        self._queue: asyncio.Queue[ExchangeRecord | None] = asyncio.Queue(queue_size)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")
        self._on_drop = on_drop
        self._writer: asyncio.Task[None] | None = None
        self.written = 0  # records written so far (lets readers skip work when unchanged)
        self.accepted = 0  # records queued so far
        self.settled = 0  # of those, records written or lost to a failed write
        # Records (and admission-count rows) not stored, by reason; what /admin/stats shows.
        self.dropped: dict[DropReason, int] = {}
        self._warn_every_s = warn_every_s
        self._warned_at: float | None = None
        self._unwarned: dict[DropReason, int] = {}

    def _drop(self, reason: DropReason, n: int, error: BaseException | None = None) -> None:
        """Count `n` lost to `reason`; one warning a minute at most says how many and why
        (a full disk fails every batch: one line each would bury the log)."""
        self.dropped[reason] = self.dropped.get(reason, 0) + n
        self._unwarned[reason] = self._unwarned.get(reason, 0) + n
        if self._on_drop:
            self._on_drop(reason, n)
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < self._warn_every_s:
            return
        since = ", ".join(f"{k} {v}" for k, v in sorted(self._unwarned.items()))
        total = ", ".join(f"{k} {v}" for k, v in sorted(self.dropped.items()))
        why = f" ({type(error).__name__}: {error})" if error is not None else ""
        log.warning("records not stored%s: %s since the last warning (%s in all); the gate "
                    "judges only what was stored; next warning in %g s at the earliest",
                    why, since, total, self._warn_every_s)
        self._warned_at = now
        self._unwarned = {}

    def start(self) -> None:
        self._writer = start_task(self._run(), "store-writer")

    def put(self, record: ExchangeRecord) -> bool:
        """Queue `record`; False (and counted) when the queue is full."""
        try:
            self._queue.put_nowait(record)
            self.accepted += 1
            return True
        except asyncio.QueueFull:
            self._drop("queue_full", 1)
            return False

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(store, *args)` on the store's thread (reads: aggregates, records)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, fn, self.sync, *args)

    def add_admission(self, t_unix: float, rows: Sequence[AdmissionRow]) -> None:
        """Write admission counts on the store's thread, before any read asked after this."""
        try:
            done = asyncio.get_running_loop().run_in_executor(
                self._executor, SqliteStore.add_admission, self.sync, t_unix, rows)
        except RuntimeError:  # closed: the counts of the last moments are lost, not the proxy
            log.error("store closed: %d admission count(s) not written", len(rows))
            return

        def written(done: asyncio.Future[None]) -> None:
            if not done.cancelled() and (error := done.exception()) is not None:
                self._drop("admission_failed", len(rows), error)

        done.add_done_callback(written)

    async def _run(self) -> None:
        stopping = False
        while not stopping:
            batch: list[ExchangeRecord] = []
            item = await self._queue.get()
            if item is not None and self.linger_s > 0:
                # Let a batch gather: each hand-off to the writer thread makes the event
                # loop wait for the GIL, so a few large batches beat many small ones.
                await asyncio.sleep(self.linger_s)
            while item is not None:
                batch.append(item)
                if len(batch) >= 2048 or self._queue.empty():
                    break
                item = self._queue.get_nowait()
            stopping = item is None
            if batch:
                done = len(batch) + int(stopping)
                try:
                    await self.call(SqliteStore.write, batch)
                    self.written += len(batch)
                except (sqlite3.Error, OSError) as exc:  # a full disk, a lost file
                    self._drop("write_failed", len(batch), exc)
                finally:
                    self.settled += len(batch)
            else:
                done = 1
            for _ in range(done):
                self._queue.task_done()

    async def flush(self) -> None:
        """Wait until every queued record is written."""
        await self._queue.join()

    async def settle(self, accepted: int, timeout_s: float = 5.0) -> bool:
        """Wait (up to `timeout_s`) until the first `accepted` records queued are written
        or lost: unlike `flush`, records queued meanwhile do not prolong the wait."""
        deadline = time.monotonic() + timeout_s
        while self.settled < accepted:
            if time.monotonic() >= deadline or self._writer is None or self._writer.done():
                return False
            await asyncio.sleep(min(0.02, self.linger_s or 0.02))
        return True

    async def close(self) -> None:
        """Write what is queued, then close the database."""
        if self._writer is not None:
            await self._queue.put(None)
            await self._writer
        await self.call(SqliteStore.close)
        self._executor.shutdown(wait=True)
