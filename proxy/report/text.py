"""Terminal rendering of a `Report` (plain text, fixed-width tables)."""

from __future__ import annotations

from collections import Counter
from statistics import median

from proxy.report.model import (
    METRIC_LABELS,
    ROLE_LABELS,
    LatencyRow,
    PairSummary,
    Report,
    lead_line,
    versions_note,
)


def ms(value_s: float | None) -> str:
    return "-" if value_s is None else f"{value_s * 1000:.1f} ms"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def mean_or_dash(values: tuple[int, ...]) -> str:
    return f"{sum(values) / len(values):.1f}" if values else "-"


def counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counter.most_common()) or "none"


def pair_line(pair: PairSummary) -> str:
    low, high = pair.match_rate_ci
    line = (
        f"compared {pair.compared}, diverged {pair.diverged}"
        f" (within top-k: {pair.close}), match rate {pct(pair.match_rate)}"
        f" [95% CI {pct(low)} .. {pct(high)}]"
    )
    if pair.diverged_fields:
        line += "; diverged first in " + ", ".join(
            f"{name} {n}" for name, n in pair.diverged_fields.items())
        if pair.diverged_later_choice:
            line += f" ({pair.diverged_later_choice} in a choice after the first)"
    if pair.first_divergence:
        first = sorted(pair.first_divergence)
        line += (
            f"; first divergence at token min {first[0]}, median {median(first):g}, max {first[-1]}"
        )
    return line


def latency_table(rows: tuple[LatencyRow, ...]) -> list[str]:
    width = max((len(METRIC_LABELS[row.metric]) for row in rows), default=6)
    width = max(width, 6)
    head = (
        f"  {'metric':<{width}} {'n old/new':>11} {'p50 old':>10} {'p50 new':>10} {'x':>6}"
        f" {'p90 old':>10} {'p90 new':>10} {'x':>6} {'p99 old':>10} {'p99 new':>10} {'x':>6}"
        f"  Mann-Whitney"
    )
    lines = [head]
    for row in rows:
        test = "-"
        if row.test is not None:
            test = f"p={row.test.p_value:.3g} effect={row.test.effect_size:+.2f}"
        lines.append(
            f"  {METRIC_LABELS[row.metric]:<{width}} {f'{row.old.n}/{row.new.n}':>11}"
            f" {ms(row.old.p50_s):>10} {ms(row.new.p50_s):>10} {times(row.p50_ratio):>6}"
            f" {ms(row.old.p90_s):>10} {ms(row.new.p90_s):>10} {times(row.p90_ratio):>6}"
            f" {ms(row.old.p99_s):>10} {ms(row.new.p99_s):>10} {times(row.p99_ratio):>6}"
            f"  {test}"
        )
    return lines


def render_text(report: Report) -> str:
    gate = report.gate
    lines = [
        (
            f"vllm-cutover report: {report.samples} mirrored requests "
            f"({report.deterministic} deterministic, {report.samples - report.deterministic} sampled)"
        ),
        f"({versions_note(report)})",
        f"IN ONE LINE: {lead_line(report)}",
    ]
    lines += [f"WARNING: {note}" for note in report.notes]
    admission = report.admission
    if admission is not None and admission.coverage is not None:
        shed = f": {admission.shed_text()}" if admission.shed_total else ""
        lines.append(f"Mirrored {admission.mirrored} of {admission.eligible} sampled requests "
                     f"({admission.coverage:.1%}); shed {admission.shed_total}{shed}")
    lines += ["", f"VERDICT: {gate.verdict.upper()}"]
    lines += [f"  - {reason}" for reason in gate.reasons] or ["  (no reasons given)"]
    lines += ["", ("Answers, deterministic requests (temperature 0 or seeded), every field "
                   "and choice:")]
    lines.append(f"  new vs old:       {pair_line(report.shadow)}")
    if report.baseline is not None:
        lines.append(f"  baseline (noise): {pair_line(report.baseline)}")
    else:
        lines.append("  baseline (noise): none (run the proxy with --baseline to measure it)")
    shadow = report.shadow
    lines.append(
        f"  not comparable {shadow.not_comparable}, comparison errors {shadow.errors},"
        f" finish-reason mismatches {shadow.finish_mismatch},"
        f" sampled requests compared as distributions {shadow.sampled}"
    )
    lines += ["", "Sampled requests (temperature > 0, no seed), compared as distributions:"]
    lines += [
        f"  {ROLE_LABELS.get(r.role, r.role):<9} requests {r.requests}, output tokens mean "
        f"{mean_or_dash(r.output_tokens)}, finish reasons: {counts(r.finish_reasons)}"
        for r in report.sampled.values()
    ] or ["  none"]
    if report.sampled_length_test is not None:
        test = report.sampled_length_test
        lines.append(
            f"  output length new vs old: Mann-Whitney p={test.p_value:.3g}, "
            f"effect {test.effect_size:+.2f}"
        )
    lines += ["", "Latency, old vs new:"]
    lines += latency_table(report.latency)
    lines += ["", "Backends:"]
    for summary in report.roles.values():
        mean_tokens = mean_or_dash(summary.output_tokens)
        lines.append(
            f"  {ROLE_LABELS.get(summary.role, summary.role):<9} requests {summary.requests},"
            f" errors {sum(summary.errors.values())} ({counts(summary.errors)}),"
            f" cancelled {summary.cancelled}, finish reasons: {counts(summary.finish_reasons)},"
            f" mean output tokens {mean_tokens}"
        )
    return "\n".join(lines) + "\n"
