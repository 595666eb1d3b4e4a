"""What the gate and the report sum up from the records: counts and latency samples.

Counting is done by SQLite (GROUP BY: it releases the GIL, Python loops would not),
over every kept record or over a cutover's evidence window: the records started at
or after its start between exactly its old and new versions, whichever of them was
primary. In a window each capture is labelled by version, not by role, in the
gate's vocabulary (`proxy.gate.verdict`: old is "primary", new is "shadow"), so after
a promotion (new primary, old shadow) the gate still judges new against old.
"""

from __future__ import annotations

import sqlite3
from array import array
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from proxy.evidence.window import EvidenceWindow
from proxy.gate.sketch import LogHistogram, PairHistogram
from proxy.gate.stats import METRICS, LatencySamples
from proxy.gate.tally import (
    LATENCY_WINDOW,
    ErrorPairs,
    LatencyRow,
    Pairs,
    PairTails,
    Tails,
    frozen_pair_tails,
    frozen_tails,
    grow_tails,
    latency_inputs,
)
from proxy.gate.verdict import AdmissionCounts, GateInputs, MatchCounts

__all__ = ["VERSION_ROLES", "PairCounts", "RoleCounts", "StoreAggregates", "TailState",
           "aggregate_rows", "query_aggregates", "window_members"]

# A version's role in the gate's vocabulary (and in windowed aggregates).
VERSION_ROLES = {"old": "primary", "new": "shadow"}


@dataclass(frozen=True)
class PairCounts:
    """Comparisons of one side (shadow or baseline) with the primary."""

    compared: int = 0  # deterministic requests with a token verdict (match or diverged)
    diverged: int = 0
    close: int = 0  # diverged, but within vLLM's top-k closeness rule
    not_comparable: int = 0
    errors: int = 0
    sampled: int = 0  # non-deterministic: compared only as distributions
    first_divergence: tuple[int, ...] = ()


@dataclass(frozen=True)
class RoleCounts:
    """Outcomes of one role's requests."""

    requests: int = 0
    errors: int = 0
    cancelled: int = 0
    finish_reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StoreAggregates:
    """What the gate and the report need, summed over the kept records."""

    records: int
    shadow: PairCounts
    baseline: PairCounts | None  # None: no baseline comparison was ever recorded
    latency: dict[str, LatencySamples]
    roles: dict[str, RoleCounts]
    admission: AdmissionCounts | None = None  # None: a store from before it was counted
    pairs: dict[str, Pairs] = field(default_factory=dict)
    tails: Tails = field(default_factory=dict)  # every quantile sample in scope, bucketed
    pair_tails: PairTails = field(default_factory=dict)  # every (baseline, shadow) pair
    error_pairs: ErrorPairs | None = None  # old's and new's errors on the same requests

    def gate_inputs(self) -> GateInputs:
        """What `proxy.gate.verdict.evaluate` judges (cancelled requests left out): the
        same as `GateInputs.from_records` over the same records."""
        baseline = self.baseline
        return GateInputs(
            new_vs_old=MatchCounts(self.shadow.compared, self.shadow.diverged,
                                   self.shadow.close),
            baseline_vs_old=MatchCounts(baseline.compared, baseline.diverged, baseline.close)
            if baseline is not None else None,
            latency=self.latency,
            requests={r: c.requests - c.cancelled for r, c in self.roles.items()},
            errors={r: c.errors for r, c in self.roles.items()},
            admission=self.admission,
            pairs=self.pairs,
            tails=self.tails,
            pair_tails=self.pair_tails,
            error_pairs=self.error_pairs,
        )

    def as_json(self) -> dict[str, Any]:
        def pair(p: PairCounts) -> dict[str, Any]:
            out = asdict(p)
            del out["first_divergence"]
            return out

        return {
            "records": self.records,
            "shadow": pair(self.shadow),
            "baseline": pair(self.baseline) if self.baseline else None,
            "latency_samples": {r: {name: len(s.metric(name)) for name in METRICS if name != "itl"}
                                for r, s in self.latency.items()},
            "roles": {r: asdict(c) for r, c in self.roles.items()},
            "admission": self.admission.as_json() if self.admission is not None else None,
        }


def aggregate_rows(records: int, comparisons: Sequence[tuple[Any, ...]],
                   first_divergences: Sequence[tuple[str, int]],
                   captures: Sequence[tuple[Any, ...]],
                   latency: Sequence[tuple[Any, ...]]) -> StoreAggregates:
    """Fold the grouped rows of `SqliteStore.aggregates` into `StoreAggregates`."""
    pairs: dict[str, dict[str, Any]] = {}
    for against, outcome, det, close, count in comparisons:
        p = pairs.setdefault(against, {"compared": 0, "diverged": 0, "close": 0,
                                       "not_comparable": 0, "errors": 0, "sampled": 0,
                                       "first_divergence": []})
        if outcome == "error":
            p["errors"] += count
        elif not det:
            p["sampled"] += count
        elif outcome == "not_comparable":
            p["not_comparable"] += count
        else:
            p["compared"] += count
            if outcome == "diverged":
                p["diverged"] += count
                p["close"] += count if close else 0
    for against, first in first_divergences:
        if against in pairs:
            pairs[against]["first_divergence"].append(first)
    made = {k: PairCounts(**{**v, "first_divergence": tuple(v["first_divergence"])})
            for k, v in pairs.items()}
    roles: dict[str, dict[str, Any]] = {}
    for role, cancelled, failed, finish, count in captures:
        r = roles.setdefault(role, {"requests": 0, "errors": 0, "cancelled": 0,
                                    "finish_reasons": {}})
        r["requests"] += count
        if cancelled:
            r["cancelled"] += count
        elif failed:
            r["errors"] += count
        if finish is not None:
            r["finish_reasons"][finish] = r["finish_reasons"].get(finish, 0) + count
    latency_samples, timed_pairs = latency_inputs(
        LatencyRow(int(exchange), role, kind, ttft, e2e, tokens,
                   array("f", itl_blob or b"").tolist())
        for exchange, role, kind, ttft, e2e, tokens, itl_blob in latency)
    return StoreAggregates(
        records=records,
        shadow=made.get("shadow", PairCounts()),
        baseline=made.get("baseline"),
        latency=latency_samples,
        roles={r: RoleCounts(**v) for r, v in roles.items()},
        pairs=timed_pairs,
    )


# `w`: the records in scope with `promoted` (1: the new version was primary) and
# `noise` (1: its baseline comparison is old-vs-old noise that counts).
_ALL = ("WITH w AS (SELECT id, deterministic AS det, stream, baseline_streamed, 0 AS promoted,"
        " 1 AS noise FROM exchange{cutoff})")
# A window is selected once into a temporary table (its records found once, not once per
# query); temporary tables work on read-only connections too.
_WINDOW_TABLE = ("CREATE TEMP TABLE IF NOT EXISTS window_scope (id INTEGER PRIMARY KEY,"
                 " det INTEGER, stream INTEGER, baseline_streamed INTEGER, promoted INTEGER,"
                 " noise INTEGER)")
_WINDOW_SELECT = """INSERT INTO temp.window_scope
WITH u AS (
    SELECT id, deterministic AS det, stream, baseline_streamed, url_primary AS p,
           url_shadow AS s, url_baseline AS b
    FROM exchange WHERE started_unix >= :since AND (:until IS NULL OR started_unix < :until))
SELECT id, det, stream, baseline_streamed, p = :new, :baseline IS NOT NULL AND p = :old AND b IS :baseline
FROM u WHERE (p = :old AND s = :new) OR (p = :new AND s = :old)"""
_WINDOW = "WITH w AS (SELECT * FROM temp.window_scope)"
# A capture's version as VERSION_ROLES names it.
_VERSION = ("CASE WHEN c.role = 'baseline' THEN 'baseline'"
            " WHEN (c.role = 'primary') != w.promoted THEN 'primary' ELSE 'shadow' END")
_COUNTED = "(c.role != 'baseline' OR w.noise)"
# tally.latency_kind: "neither" is the baseline asked unstreamed for a streamed request.
_KIND = ("CASE WHEN NOT w.stream THEN 'unstreamed' WHEN c.role = 'baseline' AND NOT"
         " w.baseline_streamed THEN 'neither' ELSE 'streamed' END")


def _scope(db: sqlite3.Connection, window: EvidenceWindow | None,
           until_unix: float | None = None) -> str:
    """The `w` the queries read: every record, or `window`'s (selected now), of those
    started before `until_unix` when given."""
    if window is None:  # a float's repr is a SQL literal: nothing from outside is pasted
        return _ALL.format(cutoff="" if until_unix is None
                           else f" WHERE started_unix < {float(until_unix)!r}")
    with db:  # ends the implicit transaction: no read snapshot is held afterwards
        db.execute(_WINDOW_TABLE)
        db.execute("DELETE FROM temp.window_scope")
        db.execute(_WINDOW_SELECT, {"since": window.since_unix, "until": until_unix,
                                    "old": window.old_url, "new": window.new_url,
                                    "baseline": window.baseline_url})
    return _WINDOW


@dataclass
class TailState:
    """The quantile samples of one scope, grown look by look: each query reads only the
    captures of records after `last_id` (records are written whole, in id order) and not
    in `beyond` (those after `last_id` already read: with a cutoff on start times, a
    record written later may count before one written earlier that does not count yet)."""

    last_id: int = 0
    tails: dict[str, dict[str, LogHistogram]] = field(default_factory=dict)
    pair_tails: dict[str, PairHistogram] = field(default_factory=dict)
    beyond: set[int] = field(default_factory=set)


_FAILED = "(c.error IS NOT NULL OR c.status IS NULL OR c.status >= 400)"  # not cancelled
# `tally.ErrorPairs`: records with an uncancelled capture of both old and new (by version).
_ERROR_PAIRS = ("SELECT COUNT(*), COALESCE(SUM(new_err AND NOT old_err), 0),"
                " COALESCE(SUM(old_err AND NOT new_err), 0) FROM ("
                f" SELECT MAX(CASE WHEN {_VERSION} = 'primary' THEN {_FAILED} END) AS old_err,"
                f" MAX(CASE WHEN {_VERSION} = 'shadow' THEN {_FAILED} END) AS new_err"
                " FROM capture c JOIN w ON w.id = c.exchange_id"
                " WHERE c.cancelled = 0 AND c.role != 'baseline' GROUP BY c.exchange_id)"
                " WHERE old_err IS NOT NULL AND new_err IS NOT NULL")
_COMPLETE = ("c.error IS NULL AND c.cancelled = 0 AND c.e2e_s IS NOT NULL"
             " AND c.status IS NOT NULL AND c.status < 400")


def _grow(db: sqlite3.Connection, scope: str, state: TailState,
          until_unix: float | None = None) -> None:
    rows = [row for row in db.execute(
        f"{scope} SELECT c.exchange_id, {_VERSION}, {_KIND}, c.ttft_s, c.e2e_s,"
        " c.output_tokens FROM capture c JOIN w ON w.id = c.exchange_id"
        f" WHERE c.exchange_id > :after AND {_COUNTED} AND {_COMPLETE}",
        {"after": state.last_id}).fetchall() if int(row[0]) not in state.beyond]
    grow_tails(state.tails, state.pair_tails, (LatencyRow(int(exchange), role, kind, ttft, e2e, tokens)
                             for exchange, role, kind, ttft, e2e, tokens in rows))
    read = state.beyond | {int(row[0]) for row in rows}
    # Every record up to the first one written but started at or after the cutoff has
    # been read; those after it that were read are remembered until it counts.
    first_later = None if until_unix is None else db.execute(
        "SELECT MIN(id) FROM exchange WHERE id > :after AND started_unix >= :until",
        {"after": state.last_id, "until": until_unix}).fetchone()[0]
    state.last_id = max([state.last_id, *read]) if first_later is None \
        else max(state.last_id, int(first_later) - 1)
    state.beyond = {i for i in read if i > state.last_id}


def query_aggregates(db: sqlite3.Connection, window: EvidenceWindow | None = None,
                     latency_window: int = LATENCY_WINDOW,
                     tails: TailState | None = None,
                     until_unix: float | None = None) -> StoreAggregates:
    """Counts over the records in scope (all, or `window`'s, of those started before
    `until_unix` when given); latency samples from the newest `latency_window` of them;
    the quantile samples of all of them, grown from `tails` (the state of the same scope
    at the previous call, with a cutoff that never moved back) when given."""
    scope = _scope(db, window, until_unix)
    state = tails if tails is not None else TailState()
    _grow(db, scope, state, until_unix)
    params = {"latency_window": latency_window}
    comparisons = db.execute(
        f"{scope} SELECT c.against, c.outcome, w.det, COALESCE(c.close_match, 0), COUNT(*)"
        " FROM comparison c JOIN w ON w.id = c.exchange_id"
        f" WHERE c.against != 'baseline' OR w.noise GROUP BY 1, 2, 3, 4", params).fetchall()
    first_divergences = db.execute(
        f"{scope} SELECT c.against, c.first_divergence FROM comparison c"
        " JOIN w ON w.id = c.exchange_id WHERE c.outcome = 'diverged'"
        " AND w.det = 1 AND c.first_divergence IS NOT NULL"
        " AND (c.against != 'baseline' OR w.noise) ORDER BY c.exchange_id", params).fetchall()
    captures = db.execute(
        f"{scope} SELECT {_VERSION}, c.cancelled, {_FAILED}, c.finish_reason,"
        f" COUNT(*) FROM capture c JOIN w ON w.id = c.exchange_id WHERE {_COUNTED}"
        " GROUP BY 1, 2, 3, 4", params).fetchall()
    # The complete captures of the newest `latency_window` records as `tally.LatencyRow`s
    # (the fold is shared with `GateInputs.from_records`), each with its latency kind.
    latency = db.execute(
        f"{scope} SELECT c.exchange_id, {_VERSION}, {_KIND}, c.ttft_s, c.e2e_s,"
        " c.output_tokens, c.itl_s FROM capture c JOIN w ON w.id = c.exchange_id"
        " WHERE c.exchange_id >= (SELECT MIN(id) FROM"
        " (SELECT id FROM w ORDER BY id DESC LIMIT :latency_window))"
        f" AND {_COUNTED} AND {_COMPLETE}"
        " ORDER BY c.exchange_id", params).fetchall()
    records = db.execute(f"{scope} SELECT COUNT(*) FROM w", params).fetchone()[0]
    n, new_only, old_only = db.execute(f"{scope} {_ERROR_PAIRS}", params).fetchone()
    return replace(aggregate_rows(int(records), comparisons, first_divergences, captures,
                                  latency), tails=frozen_tails(state.tails),
                   pair_tails=frozen_pair_tails(state.pair_tails),
                   error_pairs=ErrorPairs(int(n), int(new_only), int(old_only)))


@dataclass(frozen=True)
class PairSeen:
    """Records between one primary and one shadow backend (URLs as records name them)."""

    primary: str
    shadow: str
    records: int
    first_unix: float
    last_id: int
    baseline: str | None  # the newest of these records' baseline, if it had one


def backend_pairs(db: sqlite3.Connection) -> list[PairSeen]:
    """Every (primary, shadow) pair on record, the pair of the newest record last; records
    without a shadow or without URLs (older stores) are left out."""
    rows = db.execute(
        "WITH u AS (SELECT id, started_unix AS t, url_primary AS p, url_shadow AS s,"
        " url_baseline AS b FROM exchange)"
        " SELECT p, s, COUNT(*), MIN(t), MAX(id),"
        " (SELECT b FROM u AS v WHERE v.p = u.p AND v.s = u.s ORDER BY v.id DESC LIMIT 1)"
        " FROM u WHERE p IS NOT NULL AND s IS NOT NULL GROUP BY p, s ORDER BY MAX(id)"
    ).fetchall()
    return [PairSeen(str(p), str(s), int(n), float(t), int(i), b) for p, s, n, t, i, b in rows]


def window_members(db: sqlite3.Connection,
                   window: EvidenceWindow) -> dict[int, tuple[bool, bool]]:
    """Row id -> (promoted, baseline counts as noise) of every record in `window`."""
    scope = _scope(db, window)
    rows = db.execute(f"{scope} SELECT id, promoted, noise FROM w").fetchall()
    return {int(i): (bool(promoted), bool(noise)) for i, promoted, noise in rows}
