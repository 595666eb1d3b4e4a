"""The offline HTML report: one self-contained file, inline CSS and SVG, no scripts."""

from __future__ import annotations

import time
from collections.abc import Sequence
from html import escape

from proxy.report.divergences import DivergedList, DivergedRequest
from proxy.report.html_timeline import over_time_section
from proxy.report.model import (
    METRIC_LABELS,
    ROLE_LABELS,
    PairSummary,
    Report,
    RoleSummary,
    lead_line,
    versions_note,
)
from proxy.report.svg import COLORS, VERDICT_COLORS, Series, cdf_chart, histogram_chart
from proxy.report.text import counts, mean_or_dash, ms, pct, times

__all__ = ["COLORS", "VERDICT_COLORS", "generated_at", "page", "render_html", "verdict_block"]
# The streamed latency charts, each with the unstreamed metric drawn where no answer was
# streamed (never pooled): (title, axis label, metric, unstreamed metric or None).
LATENCY_CHARTS = (
    ("TTFT CDF", "time to first token (ms)", "ttft", None),
    ("TPOT CDF", "time per output token after the first (ms)", "tpot", "tpot_unstreamed"),
    ("ITL CDF", "inter-token latency (ms)", "itl", None),
    ("E2E latency CDF", "end-to-end latency (ms)", "e2e", "e2e_unstreamed"),
)
# A CDF's y axis: of requests, or of the gaps between tokens (ITL).
CDF_OF = {"itl": "fraction of token gaps"}
DIVERGED_HEAD = ("row id", "request id", "started (UTC)", "endpoint", "field diverged first",
                 "choice", "first divergence at", "within top-k", "old vs old")

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
svg .axes{fill:none;stroke:#999}.muted{color:#666;font-size:.9em}td.id{font-family:monospace}.warning{background:#fff4e5;border-left:4px solid #b26a00;padding:.4em .6em}
"""


def table(head: Sequence[str], rows: Sequence[str], empty: str) -> str:
    """A table of `rows` (each a `<tr>`) under `head`; with no rows, the sentence `empty`
    instead of a table of headings."""
    if not rows:
        return f"<p>{escape(empty)}</p>"
    cells = "".join(f"<th>{h}</th>" for h in head)
    return f"<table><tr>{cells}</tr>{''.join(rows)}</table>"


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
        if not (row.old.n or row.new.n):
            continue  # no sample on either side: no row of dashes
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
    head = ("metric", "n old / new", "p50 old &rarr; new", "p90", "p99", "Mann-Whitney U")
    return table(head, rows, "No latency recorded (no complete answer on either side).")


def _roles_table(roles: dict[str, RoleSummary], empty: str) -> str:
    rows = [
        f"<tr><td>{escape(ROLE_LABELS.get(s.role, s.role))}</td><td>{s.requests}</td>"
        f"<td>{escape(counts(s.errors))}</td><td>{s.cancelled}</td>"
        f"<td>{escape(counts(s.finish_reasons))}</td><td>{mean_or_dash(s.output_tokens)}</td></tr>"
        for s in roles.values()
    ]
    head = ("backend", "requests", "errors", "cancelled", "finish reasons", "mean output tokens")
    return table(head, rows, empty)


def _pair_table(report: Report) -> str:
    head = ("comparison", "compared", "diverged", "within top-k", "match rate", "95% CI",
            "not comparable / errors", "sampled", "diverged first in (field)")
    rows = [_pair_row("new vs old", report.shadow),
            _pair_row("baseline vs old (noise)", report.baseline)] if report.samples else []
    return table(head, rows, "No mirrored requests recorded.")


def _length_test(report: Report) -> str:
    test = report.sampled_length_test
    if test is None:
        return "Output lengths: not enough samples for a test."
    return (
        f"Output lengths new vs old: Mann-Whitney p={test.p_value:.3g}, "
        f"effect {test.effect_size:+.2f}."
    )


def _latency_series(report: Report, metric: str) -> list[Series]:
    """Old, new and, where it has samples of `metric`, the baseline (old's second copy)."""
    out = []
    for role in ("primary", "shadow", "baseline"):
        samples = report.samples_by_role.get(role)
        if samples is not None:
            values = [v * 1000 for v in samples.metric(metric)]
            label = {"primary": "old", "shadow": "new"}.get(role, "baseline (old copy)")
            out.append(Series(label, values, COLORS[role], dashed=role == "baseline"))
    return out


def _latency_charts(report: Report) -> tuple[list[str], list[str]]:
    """The CDFs with samples, and the names of those without any (said in a sentence)."""
    charts, missing = [], []
    for title, axis, metric, unstreamed in LATENCY_CHARTS:
        series = _latency_series(report, metric)
        drawn = title
        if not any(s.values for s in series) and unstreamed is not None:
            drawn, series = f"{title} (unstreamed answers)", _latency_series(report, unstreamed)
        if any(s.values for s in series):
            charts.append(cdf_chart(drawn, axis, series,
                                    CDF_OF.get(metric, "fraction of requests")))
        else:
            missing.append(METRIC_LABELS[metric])
    return charts, missing


def _latency_section(report: Report) -> str:
    charts, missing = _latency_charts(report)
    note = ""
    if missing:
        note = f"<p>No {escape(', '.join(missing))} recorded (no streamed answer).</p>"
    old, baseline = (report.samples_by_role.get(role) for role in ("primary", "baseline"))
    if old is not None and old.ttft_s and "baseline" in report.roles \
            and (baseline is None or not baseline.ttft_s):
        note += ('<p class="muted">The baseline has no streamed timings to draw: it was '
                 "asked unstreamed (--no-baseline-stream).</p>")
    return f'{_latency_table(report)}\n{note}<div class="charts">{"".join(charts)}</div>'


def _positions_chart(report: Report) -> str:
    positions = [Series("new vs old", report.shadow.first_divergence, COLORS["shadow"])]
    if report.baseline is not None:
        positions.append(
            Series("baseline vs old", report.baseline.first_divergence, COLORS["baseline"])
        )
    if not any(series.values for series in positions):
        return ""
    return histogram_chart("First divergence positions", "token index", positions)


def _diverged_row(entry: DivergedRequest) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(entry.started_unix))
    position = "-" if entry.position is None else f"{entry.unit} {entry.position}"
    close = {True: "yes", False: "no", None: "-"}[entry.close]
    cells = ["-" if entry.row_id is None else str(entry.row_id), entry.request_id, started,
             entry.endpoint, entry.field, str(entry.choice), position, close,
             entry.baseline or "-"]
    return ("<tr>" + "".join(f'<td class="id">{escape(c)}</td>' if i < 2 else
                             f"<td>{escape(c)}</td>" for i, c in enumerate(cells)) + "</tr>")


def _diverged_section(listing: DivergedList) -> str:
    """The diverged requests' ids and positions, never their text."""
    rows = [_diverged_row(entry) for entry in listing.shown]
    body = table(DIVERGED_HEAD, rows, "No diverged requests recorded.")
    if not rows:
        return body
    more = listing.total - len(rows)
    shown = (f"The first {len(rows)} of {listing.total} (oldest first); {more} more."
             if more else f"All {listing.total}, oldest first.")
    return (f"<p>{shown} Fetch one with <code>GET /admin/records?after=ROW_ID-1&amp;limit=1"
            "</code> (admin token); its prompt and answers are on record only when the proxy "
            f"ran with --store-text. No text is shown here.</p>\n{body}")


def render_html(report: Report, title: str = "vllm-cutover report") -> str:
    return page(title, f"""<p class="lead"><b>{escape(lead_line(report))}</b></p>
<p class="muted">{report.samples} mirrored requests \
({report.deterministic} deterministic). Generated {generated_at()}. \
{escape(versions_note(report))}.</p>
{"".join(f'<p class="warning"><b>Warning:</b> {escape(note)}</p>' for note in report.notes)}
{verdict_block(report.gate.verdict, report.gate.reasons)}
<h2>The verdict over time</h2>
{over_time_section(report.timeline, report.gate.verdict)}
<h2>Answers, field by field (deterministic requests)</h2>
{_pair_table(report)}
<div class="charts">{_positions_chart(report)}</div>
<h2>Diverged requests (new vs old)</h2>
{_diverged_section(report.diverged_requests)}
<h2>Latency, old vs new</h2>
{_latency_section(report)}
<h2>Sampled requests (compared as distributions)</h2>
{_roles_table(report.sampled, "No sampled requests recorded.")}
<p>{escape(_length_test(report))}</p>
<h2>Backends (all requests)</h2>
{_roles_table(report.roles, "No requests recorded.")}""")


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
