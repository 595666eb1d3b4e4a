"""The tune report as text (aligned, within 100 columns) and as one self-contained HTML
page (inline CSS, no script, nothing fetched; every value escaped). Values in, text out."""

from __future__ import annotations

import html
import textwrap

from proxy.tune.report import CandidateRow, LatencyRatio, TuneReport, WinningCommand

WIDTH = 100


def _ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def _bound(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "?"


def latency_text(x: LatencyRatio) -> str:
    """`max_ttft_p50_ratio 0.91x (0.85..0.98, limit 1.10) pass`."""
    if x.ratio_bounds is not None:
        within = f"{_bound(x.ratio_bounds[0])}..{_bound(x.ratio_bounds[1])}, "
    elif x.share_slower_bounds is not None:
        low, high = x.share_slower_bounds
        within = f"slower on {low:.0%}..{high:.0%} of requests, "
    else:
        within = ""
    limit = f"limit {x.limit:.2f}" if x.limit is not None else "no limit"
    return f"{x.check} {_ratio(x.ratio)} ({within}{limit}) {x.status}"


def divergence_text(row: CandidateRow) -> str:
    counts = row.divergence_by_field
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) if counts else "none"


def _requests(row: CandidateRow) -> tuple[str, str]:
    stopped = row.stopped_at_requests
    return str(row.requests), str(stopped) if stopped is not None else "-"


def command_text(command: WinningCommand | None, winner: str | None) -> list[str]:
    if command is None:
        return ["winning command: none (no winner)" if winner is None
                else f"winning command: {winner} is not among the candidates"]
    if command.mode == "adopt":
        return [f"winning command: none for {command.candidate}: {command.note}",
                f"  url: {command.url}"]
    lines = [f"winning command ({command.note}):"]
    if command.line is None:
        lines = [f"winning command: not known for {command.candidate}: {command.note}"]
    else:
        lines.append(f"  {command.line}")
    if command.env:
        lines.append("  environment: " + " ".join(f"{k}={v}" for k, v in command.env.items()))
    return lines


def render_text(report: TuneReport) -> str:
    """What `tune report` prints."""
    if report.phase is None:
        return "no tune has run on this proxy\n"
    lines = [f"tune {report.id}: {report.phase}",
             *textwrap.wrap(f"reason: {report.reason}", WIDTH, subsequent_indent="  "),
             f"old: {report.old_url}   winner: {report.winner or '-'}", ""]
    rows = [("candidate", "state", "verdict", "requests", "stopped at", "paired", "median",
             "diverged")]
    for r in report.candidates:
        seen, stopped = _requests(r)
        rows.append((r.name, r.state, r.verdict or "-", seen, stopped, _ratio(r.paired_ratio),
                     _ratio(r.median_ratio), str(sum(r.divergence_by_field.values()))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    lines.append("(paired, median: answer time over old's; paired is the median per request)")
    for r in report.candidates:
        lines.append("")
        lines += textwrap.wrap(f"{r.name} ({r.state}): {r.reason or '-'}", WIDTH,
                               subsequent_indent="    ")
        lines += textwrap.wrap(f"divergence: {divergence_text(r)}", WIDTH,
                               initial_indent="  ", subsequent_indent="    ")
        for x in r.latency:
            lines += textwrap.wrap(latency_text(x), WIDTH, initial_indent="  latency: ",
                                   subsequent_indent="    ")
    lines.append("")
    lines += command_text(report.command, report.winner)
    return "\n".join(lines) + "\n"


_STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;
vertical-align:top}th{background:#f3f3f3}tr.winner td{background:#eef8ee}
td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;word-break:break-all}
ul{margin:0;padding-left:1.2em}"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _row_html(r: CandidateRow) -> str:
    seen, stopped = _requests(r)
    divergence = divergence_text(r)
    latency = "".join(f"<li>{_e(latency_text(x))}</li>" for x in r.latency)
    cells = [f"<td>{_e(r.name)}</td>", f"<td>{_e(r.state)}</td>",
             f"<td>{_e(r.verdict or '-')}</td>", f"<td>{_e(r.reason or '-')}</td>",
             f'<td class="num">{_e(seen)}</td>', f'<td class="num">{_e(stopped)}</td>',
             f"<td>{_e(divergence)}</td>",
             f"<td><ul>{latency}</ul></td>" if latency else "<td>-</td>",
             f'<td class="num">{_e(_ratio(r.median_ratio))}</td>',
             f'<td class="num">{_e(_ratio(r.paired_ratio))}</td>']
    klass = ' class="winner"' if r.state == "winner" else ""
    return f"<tr{klass}>{''.join(cells)}</tr>"


def render_html(report: TuneReport) -> str:
    """One page: the table and the winning command; no script, nothing fetched."""
    title = f"vllm-cutover tune {report.id or '-'}: {report.phase or 'no tune'}"
    head = ("<tr><th>candidate</th><th>state</th><th>verdict</th><th>why it stopped</th>"
            "<th>requests</th><th>stopped at</th><th>divergence by field</th>"
            "<th>latency ratios (bounds, limit)</th><th>median / old</th>"
            "<th>paired / old</th></tr>")
    rows = "\n".join(_row_html(r) for r in report.candidates)
    command = "\n".join(command_text(report.command, report.winner))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>\n"
            f"<h1>{_e(title)}</h1>\n<p>reason: {_e(report.reason or '-')}<br>"
            f"old: {_e(report.old_url or '-')}<br>winner: {_e(report.winner or '-')}</p>\n"
            f"<table>\n{head}\n{rows}\n</table>\n<h2>Winning command</h2>\n"
            f"<pre>{_e(command)}</pre>\n</body></html>\n")
