"""Aggregates the gate reads: comparison counts, samples, requests and errors per role, the
per-request pairs, and how many sampled requests were mirrored at all (no I/O).

Built from records in memory (`GateInputs.from_records`) or from the store's rows
(`proxy.evidence.aggregates`); both hand their complete captures to one fold (`latency_inputs`), so
the samples, the output lengths and the pairs the gate judges have one builder.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

# An admission count: (primary URL, shadow URL, outcome, count); outcome is ELIGIBLE (the
# sampler chose the request) or the reason an eligible request was not mirrored.
AdmissionRow = tuple[str, str, str, int]
ELIGIBLE = "eligible"

from proxy.capture.request import STATEFUL_KEYS, UNREADABLE
from proxy.capture.types import Capture, Role
from proxy.compare.types import Comparison, ExchangeRecord
from proxy.gate.sketch import LogHistogram, PairHistogram
from proxy.gate.stats import LatencySamples


@dataclass(frozen=True)
class MatchCounts:
    """Deterministic requests compared (match or diverged), how many diverged, how many of
    those were still close by vLLM's top-k rule."""

    compared: int = 0
    diverged: int = 0
    close: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.close <= self.diverged <= self.compared:
            raise ValueError("need 0 <= close <= diverged <= compared, got "
                             f"{self.close!r}/{self.diverged!r}/{self.compared!r}")

    @property
    def matched(self) -> int:
        return self.compared - self.diverged

    def counting_close_as_match(self) -> MatchCounts:
        return MatchCounts(self.compared, self.diverged - self.close, 0)

    @property
    def match_rate(self) -> float | None:
        return self.matched / self.compared if self.compared else None

    @classmethod
    def of(cls, comparisons: Iterable[Comparison], against: Role = "shadow") -> MatchCounts:
        compared = diverged = close = 0
        for comparison in comparisons:
            if comparison.against == against and comparison.outcome in ("match", "diverged"):
                compared += 1
                if comparison.outcome == "diverged":
                    diverged += 1
                    close += comparison.close_match is True
        return cls(compared, diverged, close)


# Shed reasons that are not load: requests continuing server-side state (`STATEFUL_KEYS`)
# and bodies the proxy cannot read as a request (UNREADABLE).
UNMIRRORABLE_REASONS = frozenset(reason for _, reason in STATEFUL_KEYS) | {UNREADABLE}


@dataclass(frozen=True)
class AdmissionCounts:
    """Requests the sampler chose (eligible) and those shed unmirrored, per reason."""

    eligible: int = 0
    shed: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: Iterable[tuple[str, int]]) -> AdmissionCounts:
        """From (outcome, count) pairs."""
        eligible, shed = 0, dict[str, int]()
        for outcome, count in rows:
            if outcome == ELIGIBLE:
                eligible += count
            elif count:
                shed[outcome] = shed.get(outcome, 0) + count
        return cls(eligible, dict(sorted(shed.items(), key=lambda kv: (-kv[1], kv[0]))))

    @property
    def shed_total(self) -> int:
        return sum(self.shed.values())

    @property
    def mirrored(self) -> int:
        return max(0, self.eligible - self.shed_total)

    @property
    def unmirrorable(self) -> int:
        """Requests no shadow could answer (Responses-API state it does not have)."""
        return sum(n for reason, n in self.shed.items() if reason in UNMIRRORABLE_REASONS)

    @property
    def coverage(self) -> float | None:
        """Share of the mirrorable eligible requests that were mirrored (None before any).
        Unmirrorable ones are shown, not held against it: coverage is about shedding under
        load, and a multi-turn Responses client would otherwise never let a cutover pass."""
        mirrorable = self.eligible - self.unmirrorable
        return self.mirrored / mirrorable if mirrorable > 0 else None

    def shed_text(self) -> str:
        """"overload 30, worker_busy 9" (most first)."""
        return ", ".join(f"{reason} {n}" for reason, n in self.shed.items())

    def as_json(self) -> dict[str, Any]:
        coverage = self.coverage
        return {"eligible": self.eligible, "mirrored": self.mirrored,
                "shed": dict(self.shed), "shed_total": self.shed_total,
                "unmirrorable": self.unmirrorable,
                "coverage": coverage, "drop_rate": None if coverage is None else 1 - coverage}


@dataclass(frozen=True)
class ErrorPairs:
    """Requests both old ("primary") and new ("shadow") answered, not cancelled: how many,
    and on how many only new's answer failed (`new_only`) or only old's (`old_only`).
    Deterministic or not: an error needs no comparable answer."""

    n: int = 0
    new_only: int = 0
    old_only: int = 0

    def __post_init__(self) -> None:
        if min(self.n, self.new_only, self.old_only) < 0 \
                or self.new_only + self.old_only > self.n:
            raise ValueError("need 0 <= new_only + old_only <= n, got "
                             f"{self.new_only!r} + {self.old_only!r} of {self.n!r}")

    @classmethod
    def of(cls, records: Iterable[ExchangeRecord]) -> ErrorPairs:
        n = new_only = old_only = 0
        for record in records:
            failed = {cap.role: not complete(cap) for cap in record.captures
                      if not cap.cancelled and cap.role in ("primary", "shadow")}
            if len(failed) == 2:
                n += 1
                new_only += failed["shadow"] and not failed["primary"]
                old_only += failed["primary"] and not failed["shadow"]
        return cls(n, new_only, old_only)


@dataclass(frozen=True)
class Pairs:
    """One quantity measured on both sides of the same requests, in arrival order: `old[i]`
    and `new[i]` answer one request. `basis` says how both sides were timed: "capture
    worker" (shadow and baseline read by the same process the same way), "request" (a
    count, such as output tokens, that has no clock)."""

    old: tuple[float, ...] = ()
    new: tuple[float, ...] = ()
    basis: str = ""

    def __post_init__(self) -> None:
        if len(self.old) != len(self.new):
            raise ValueError(f"pairs need equal lengths, got {len(self.old)} old and "
                             f"{len(self.new)} new")

    def __len__(self) -> int:
        return len(self.new)


# Pair bases (`Pairs.basis`); one place for the words records and reports show.
WORKER_BASIS = "capture worker"
COUNT_BASIS = "request"
PAIRED_METRICS = ("ttft", "tpot", "e2e_unstreamed", "tpot_unstreamed")
# The samples the report shows and the paired p50 and length checks read come from the
# newest this many records (memory and time bounded). The quantile checks read every
# sample since evidence began, bucketed (`GateInputs.tails`, `proxy.gate.sketch`): a
# p99 bound must keep tightening as traffic comes, where the window stopped it.
LATENCY_WINDOW = 5000
# The metrics judged by quantile ratios, and so kept whole in `GateInputs.tails`.
TAIL_METRICS = PAIRED_METRICS
Tails = Mapping[str, Mapping[str, LogHistogram]]  # role -> metric -> every sample since start
PairTails = Mapping[str, PairHistogram]  # metric -> every (baseline, shadow) pair since start


@dataclass(frozen=True)
class GateInputs:
    """Aggregates the gate judges; latency/requests/errors are keyed by role, `pairs` by
    quantity (`PAIRED_METRICS` and "output_tokens")."""

    new_vs_old: MatchCounts
    baseline_vs_old: MatchCounts | None = None
    latency: Mapping[str, LatencySamples] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)
    errors: Mapping[str, int] = field(default_factory=dict)
    admission: AdmissionCounts | None = None  # None: not counted (records from elsewhere)
    pairs: Mapping[str, Pairs] = field(default_factory=dict)
    # Whether the source knows which requests both sides answered (exchange records do;
    # Prometheus histograms do not): without it, p50 is judged unpaired, by quantile ratios.
    paired: bool = True
    # Every sample of TAIL_METRICS since evidence began (records and the store keep them;
    # empty: the quantile checks read `latency`).
    tails: Tails = field(default_factory=dict)
    # Every (baseline, shadow) pair of TAIL_METRICS since evidence began: the paired p99
    # checks read them (empty: the p99 checks judge the two quantiles apart).
    pair_tails: PairTails = field(default_factory=dict)
    # Old's and new's errors on the same requests (None: the source cannot pair them, as
    # Prometheus cannot; the error check is then judged unpaired).
    error_pairs: ErrorPairs | None = None

    @classmethod
    def from_records(cls, records: Iterable[ExchangeRecord],
                     latency_window: int = LATENCY_WINDOW) -> GateInputs:
        """Aggregate stored or in-memory exchange records (the same meaning as the store's
        `aggregates`: latency and pairs from the newest `latency_window` records)."""
        records = list(records)
        comparisons: list[Comparison] = []
        requests: dict[str, int] = {}
        errors: dict[str, int] = {}
        has_baseline = False
        for record in records:
            if record.meta.deterministic:  # sampled ones compare only as distributions
                comparisons.extend(record.comparisons)
            for cap in record.captures:
                if cap.cancelled:
                    continue
                has_baseline = has_baseline or cap.role == "baseline"
                requests[cap.role] = requests.get(cap.role, 0) + 1
                errors[cap.role] = errors.get(cap.role, 0) + (not complete(cap))
        rows = [row for index, record in enumerate(records)
                for row in latency_rows(index, record)]
        newest = len(records) - latency_window
        latency, pairs = latency_inputs(row for row in rows if row.exchange >= newest)
        tails: dict[str, dict[str, LogHistogram]] = {}
        pair_tails: dict[str, PairHistogram] = {}
        grow_tails(tails, pair_tails, rows)
        return cls(
            new_vs_old=MatchCounts.of(comparisons, "shadow"),
            baseline_vs_old=MatchCounts.of(comparisons, "baseline") if has_baseline else None,
            latency=latency,
            requests=requests,
            errors=errors,
            pairs=pairs,
            tails=tails,
            pair_tails=pair_tails,
            error_pairs=ErrorPairs.of(records),
        )


LatencyKind = Literal["streamed", "unstreamed", "neither"]
LATENCY_KINDS: tuple[LatencyKind, ...] = ("streamed", "unstreamed", "neither")


def latency_kind(record: ExchangeRecord, cap: Capture) -> LatencyKind:
    """Which latency family `cap`'s timing belongs to: a streamed answer, an unstreamed
    answer to an unstreamed request, or "neither": the baseline asked unstreamed for a
    streamed request (the default, without --baseline-stream). Its E2E is of requests the
    clients streamed, so it is not like the shadow's unstreamed E2E; counted as such, it
    made the unstreamed family look present in purely streamed traffic and the gate wait
    for shadow samples that never come. Its tokens and length still count."""
    if not record.meta.stream:
        return "unstreamed"
    if cap.role == "baseline" and not record.baseline_streamed:
        return "neither"
    return "streamed"


def complete(cap: Capture) -> bool:
    """An answer that arrived whole: no error, not cancelled, a status below 400."""
    return cap.error is None and not cap.cancelled and cap.status is not None \
        and cap.status < 400


@dataclass(frozen=True)
class LatencyRow:
    """One complete capture's timing, as the store selects it and as records give it."""

    exchange: int  # arrival order of its record (a row id, or an index)
    role: str
    kind: LatencyKind
    ttft_s: float | None
    e2e_s: float
    output_tokens: int | None
    itl_s: Sequence[float] = ()


def latency_rows(exchange: int, record: ExchangeRecord) -> list[LatencyRow]:
    """`record`'s complete captures as rows (what the store's query selects)."""
    return [LatencyRow(exchange, cap.role, latency_kind(record, cap), cap.ttft_s, cap.e2e_s,
                       cap.output_tokens, cap.itl_s)
            for cap in record.captures if complete(cap) and cap.e2e_s is not None]


def latency_inputs(rows: Iterable[LatencyRow], max_itl_samples: int = 20_000,
                   ) -> tuple[dict[str, LatencySamples], dict[str, Pairs]]:
    """The one fold of complete captures into per-role samples (each in its `latency_kind`,
    never pooled; inter-token gaps from the newest answers up to `max_itl_samples`) and
    per-request pairs: output tokens of primary and shadow, timings of baseline and shadow
    (both read by the capture worker: like with like)."""
    ordered = sorted(rows, key=lambda r: r.exchange)
    samples: dict[str, dict[str, list[float]]] = {}
    names = ("ttft", "itl", "tpot", "e2e", "output_tokens", "e2e_unstreamed",
             "tpot_unstreamed")
    itl_of: dict[int, Sequence[float]] = {}
    itl_left = max_itl_samples
    for row in reversed(ordered):  # the newest answers' gaps first
        if row.kind == "streamed" and row.itl_s and itl_left > 0:
            itl_of[id(row)] = row.itl_s[:itl_left]
            itl_left -= len(row.itl_s)
    by_exchange: dict[int, dict[str, dict[str, float]]] = {}
    for row in ordered:
        of_role = samples.setdefault(row.role, {name: [] for name in names})
        values = _row_values(row)
        for name, value in values.items():
            of_role[name].append(value)
        of_role["itl"].extend(itl_of.get(id(row), ()))
        by_exchange.setdefault(row.exchange, {})[row.role] = values
    return ({role: _samples(of_role) for role, of_role in samples.items()},
            _pairs(by_exchange.values()))


def _row_values(row: LatencyRow) -> dict[str, float]:
    values: dict[str, float] = {}
    if row.output_tokens is not None:
        values["output_tokens"] = row.output_tokens
    if row.kind == "streamed":
        values["e2e"] = row.e2e_s
        if row.ttft_s is not None:
            values["ttft"] = row.ttft_s
            if row.output_tokens is not None and row.output_tokens > 1:
                values["tpot"] = (row.e2e_s - row.ttft_s) / (row.output_tokens - 1)
    elif row.kind == "unstreamed":
        values["e2e_unstreamed"] = row.e2e_s
        if row.output_tokens is not None and row.output_tokens >= 1:
            values["tpot_unstreamed"] = row.e2e_s / row.output_tokens
    return values


def grow_tails(tails: dict[str, dict[str, LogHistogram]], pair_tails: dict[str, PairHistogram],
               rows: Iterable[LatencyRow]) -> None:
    """Add `rows`' samples of TAIL_METRICS to `tails` (role -> metric -> sketch), each in its
    latency kind as `latency_inputs` folds them, and each request's (baseline, shadow) pair
    of them to `pair_tails` (metric -> joint sketch): old and new timed by the capture
    worker on the same request, as `Pairs` are. A request's rows come in one call."""
    by_exchange: dict[int, dict[str, dict[str, float]]] = {}
    for row in rows:
        values = _row_values(row)
        by_exchange.setdefault(row.exchange, {})[row.role] = values
        of_role = tails.setdefault(row.role, {})
        for metric in TAIL_METRICS:
            value = values.get(metric)
            if value is not None:
                of_role.setdefault(metric, LogHistogram()).add((value,))
    for by_role in by_exchange.values():
        old, new = by_role.get("baseline"), by_role.get("shadow")
        if old is None or new is None:
            continue
        for metric in TAIL_METRICS:
            if metric in old and metric in new:
                pair_tails.setdefault(metric, PairHistogram()).add(old[metric], new[metric])


def frozen_tails(tails: Tails) -> dict[str, dict[str, LogHistogram]]:
    """A copy of `tails` that later growth does not change (what one verdict judges)."""
    return {role: {metric: sketch.frozen() for metric, sketch in of_role.items()}
            for role, of_role in tails.items()}


def frozen_pair_tails(pair_tails: PairTails) -> dict[str, PairHistogram]:
    """A copy of `pair_tails` that later growth does not change."""
    return {metric: sketch.frozen() for metric, sketch in pair_tails.items()}


def _samples(of_role: dict[str, list[float]]) -> LatencySamples:
    return LatencySamples(
        ttft_s=tuple(of_role["ttft"]), itl_s=tuple(array("f", of_role["itl"]).tolist()),
        tpot_s=tuple(of_role["tpot"]), e2e_s=tuple(of_role["e2e"]),
        output_tokens=tuple(int(v) for v in of_role["output_tokens"]),
        e2e_unstreamed_s=tuple(of_role["e2e_unstreamed"]),
        tpot_unstreamed_s=tuple(of_role["tpot_unstreamed"]))


def _pairs(exchanges: Iterable[dict[str, dict[str, float]]]) -> dict[str, Pairs]:
    found: dict[str, tuple[list[float], list[float]]] = {}
    for by_role in exchanges:
        for name, old_role, basis_metrics in (
                ("output_tokens", "primary", ("output_tokens",)),
                ("", "baseline", PAIRED_METRICS)):
            old, new = by_role.get(old_role), by_role.get("shadow")
            if old is None or new is None:
                continue
            for metric in basis_metrics:
                if metric in old and metric in new:
                    olds, news = found.setdefault(metric, ([], []))
                    olds.append(old[metric])
                    news.append(new[metric])
    return {metric: Pairs(tuple(olds), tuple(news),
                          COUNT_BASIS if metric == "output_tokens" else WORKER_BASIS)
            for metric, (olds, news) in found.items()}


def latency_by_role(captures: Iterable[tuple[ExchangeRecord, Capture]]
                    ) -> dict[str, LatencySamples]:
    """Per-role latency samples, each capture in its `latency_kind` (never pooled)."""
    rows: list[LatencyRow] = []
    index: dict[int, int] = {}
    for record, cap in captures:
        if complete(cap) and cap.e2e_s is not None:
            exchange = index.setdefault(id(record), len(index))
            rows.append(LatencyRow(exchange, cap.role, latency_kind(record, cap), cap.ttft_s,
                                   cap.e2e_s, cap.output_tokens, cap.itl_s))
    return latency_inputs(rows, max_itl_samples=10**12)[0]
