"""The offline HTML report: one self-contained file, inline CSS and SVG, no scripts."""

from __future__ import annotations

import time
from html import escape

from proxy.report.model import (
    METRIC_LABELS,
    ROLE_LABELS,
    PairSummary,
    Report,
    RoleSummary,
    lead_line,
    versions_note,
)
from proxy.report.svg import Series, cdf_chart, histogram_chart
from proxy.report.text import counts, mean_or_dash, ms, pct, times

COLORS = {"primary": "#1f77b4", "shadow": "#ff7f0e", "baseline": "#7f7f7f"}
VERDICT_COLORS = {"pass": "#2e7d32", "fail": "#c62828", "inconclusive": "#b26a00"}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1180px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
.verdict{color:#fff;padding:.8em 1.2em;border-radius:6px;margin:1em 0}
.verdict b{font-size:1.4em;letter-spacing:.05em}.verdict ul{margin:.4em 0 0 0}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
td,th{border:1px solid #ddd;padding:.3em .6em;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}
.charts{display:flex;flex-wrap:wrap;gap:1em}
svg{background:#fff;border:1px solid #e4e4e4;border-radius:4px;font-size:11px}
svg .title{font-size:13px;font-weight:600}svg .grid{stroke:#eee}
svg .axes{fill:none;stroke:#999}.muted{color:#666;font-size:.9em}.warning{background:#fff4e5;border-left:4px solid #b26a00;padding:.4em .6em}
"""


def _pair_row(label: str, pair: PairSummary | None) -> str:
    if pair is None:
        return f"<tr><td>{escape(label)}</td><td colspan='8'>not measured (no --baseline)</td></tr>"
    low, high = pair.match_rate_ci
    return (
        f"<tr><td>{escape(label)}</td><td>{pair.compared}</td><td>{pair.diverged}</td>"
        f"<td>{pair.close}</td><td>{pct(pair.match_rate)}</td><td>{pct(low)} .. {pct(high)}</td>"
        f"<td>{pair.not_comparable + pair.errors}</td><td>{pair.sampled}</td>"
        f"<td>{escape(_fields_text(pair))}</td></tr>"
    )


def _fields_text(pair: PairSummary) -> str:
    """"tool_calls 3, content 1 (1 in a choice after the first)" or "none"."""
    text = ", ".join(f"{name} {n}" for name, n in pair.diverged_fields.items()) or "none"
    if pair.diverged_later_choice:
        text += f" ({pair.diverged_later_choice} in a choice after the first)"
    return text


def _latency_table(report: Report) -> str:
    rows = []
    for row in report.latency:
        test = "-"
        if row.test is not None:
            test = f"p={row.test.p_value:.3g}, effect {row.test.effect_size:+.2f}"
        cells = [
            METRIC_LABELS[row.metric],
            f"{row.old.n} / {row.new.n}",
            *(
                f"{ms(old)} &rarr; {ms(new)} ({times(r)})"
                for old, new, r in (
                    (row.old.p50_s, row.new.p50_s, row.p50_ratio),
                    (row.old.p90_s, row.new.p90_s, row.p90_ratio),
                    (row.old.p99_s, row.new.p99_s, row.p99_ratio),
                )
            ),
            test,
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in ("metric", "n old / new", "p50 old &rarr; new", "p90", "p99", "Mann-Whitney U")
    )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _roles_table(roles: dict[str, RoleSummary]) -> str:
    rows = []
    for s in roles.values():
        rows.append(
            f"<tr><td>{escape(ROLE_LABELS.get(s.role, s.role))}</td><td>{s.requests}</td>"
            f"<td>{escape(counts(s.errors))}</td><td>{s.cancelled}</td>"
            f"<td>{escape(counts(s.finish_reasons))}</td><td>{mean_or_dash(s.output_tokens)}</td></tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "backend",
            "requests",
            "errors",
            "cancelled",
            "finish reasons",
            "mean output tokens",
        )
    )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _length_test(report: Report) -> str:
    test = report.sampled_length_test
    if test is None:
        return "Output lengths: not enough samples for a test."
    return (
        f"Output lengths new vs old: Mann-Whitney p={test.p_value:.3g}, "
        f"effect {test.effect_size:+.2f}."
    )


def _latency_series(report: Report, metric: str) -> list[Series]:
    out = []
    for role in ("primary", "shadow", "baseline"):
        samples = report.samples_by_role.get(role)
        if samples is not None:
            values = [v * 1000 for v in samples.metric(metric)]
            label = {"primary": "old", "shadow": "new"}.get(role, "baseline (old copy)")
            out.append(Series(label, values, COLORS[role], dashed=role == "baseline"))
    return out


def _e2e_chart(report: Report) -> str:
    """Streamed answers' E2E; unstreamed ones' where no answer was streamed (never pooled)."""
    streamed = _latency_series(report, "e2e")
    if any(series.values for series in streamed):
        return cdf_chart("E2E latency CDF", "end-to-end latency (ms)", streamed)
    return cdf_chart("E2E latency CDF (unstreamed answers)", "end-to-end latency (ms)",
                     _latency_series(report, "e2e_unstreamed"))


def render_html(report: Report, title: str = "vllm-cutover report") -> str:
    gate = report.gate
    positions = [Series("new vs old", report.shadow.first_divergence, COLORS["shadow"])]
    if report.baseline is not None:
        positions.append(
            Series("baseline vs old", report.baseline.first_divergence, COLORS["baseline"])
        )
    charts = [
        cdf_chart("TTFT CDF", "time to first token (ms)", _latency_series(report, "ttft")),
        _e2e_chart(report),
        histogram_chart("First divergence positions", "token index", positions),
    ]
    pair_head = "".join(
        f"<th>{h}</th>"
        for h in (
            "comparison",
            "compared",
            "diverged",
            "within top-k",
            "match rate",
            "95% CI",
            "not comparable / errors",
            "sampled",
            "diverged first in (field)",
        )
    )
    return page(title, f"""<p class="lead"><b>{escape(lead_line(report))}</b></p>
<p class="muted">{report.samples} mirrored requests \
({report.deterministic} deterministic). Generated {generated_at()}. \
{escape(versions_note(report))}.</p>
{"".join(f'<p class="warning"><b>Warning:</b> {escape(note)}</p>' for note in report.notes)}
{verdict_block(gate.verdict, gate.reasons)}
<h2>Answers, field by field (deterministic requests)</h2>
<table><tr>{pair_head}</tr>{_pair_row("new vs old", report.shadow)}
{_pair_row("baseline vs old (noise)", report.baseline)}</table>
<h2>Latency, old vs new</h2>
{_latency_table(report)}
<div class="charts">{"".join(charts)}</div>
<h2>Sampled requests (compared as distributions)</h2>
{_roles_table(report.sampled)}
<p>{escape(_length_test(report))}</p>
<h2>Backends (all requests)</h2>
{_roles_table(report.roles)}""")


def generated_at() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def verdict_block(verdict: str, reasons: list[str]) -> str:
    """The coloured verdict box with its reasons."""
    color = VERDICT_COLORS.get(verdict, "#555")
    items = "".join(f"<li>{escape(r)}</li>" for r in reasons)
    return (f'<div class="verdict" style="background:{color}"><b>{escape(verdict.upper())}'
            f"</b>\n<ul>{items}</ul></div>")


def page(title: str, body: str) -> str:
    """A self-contained HTML page in the report's style."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>{_CSS}</style></head><body>
<h1>{escape(title)}</h1>
{body}
</body></html>
"""
