"""Recording rules and Argo Rollouts `prometheus` analysis metrics that reproduce the gate's
checks in Prometheus alone (no vllm-cutover binary in the loop).

Written into deploy/kubernetes (PrometheusRule, AnalysisTemplate) and deploy/prometheus
(a plain rules file) by `python -m proxy.fleet.rules`; a test checks the files match.
What they cannot do that `vllm-cutover gate` does: latency ratios are judged without the
Mann-Whitney test (a ratio over its limit fails even when not significant) and output
lengths are not compared. Latency is judged per family, streamed (TTFT, TPOT) and
unstreamed (E2E, E2E per completion token), each only where the traffic has it.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from typing import Any

from proxy.fleet.promql import (
    COMPARISONS,
    DROPPED,
    E2E_UNSTREAMED,
    REQUESTS,
    SAMPLED,
    SHED_REASONS,
    TPOT,
    TPOT_UNSTREAMED,
    TTFT,
    Selector,
    parse_selector,
)
from proxy.gate.verdict import GateCriteria

# Five measurements two minutes apart after five minutes of evidence; two failed ones fail
# the run, one inconclusive one makes it Inconclusive (Argo pauses the Rollout for a
# person): an inconclusive gate never promotes by itself.
ARGO_SCHEDULE = {"initialDelay": "5m", "interval": "2m", "count": 5, "failureLimit": 1,
                 "inconclusiveLimit": 0}
# The latency ratios recorded (p50, p99), streamed and unstreamed, by histogram; and the
# series that count each family's answers (never pooled: a family without samples on
# either version is not applicable while the other has some).
LATENCY_HISTOGRAMS = {"ttft": TTFT, "tpot": TPOT, "e2e_unstreamed": E2E_UNSTREAMED,
                      "tpot_unstreamed": TPOT_UNSTREAMED}
FAMILY_COUNTS = {"streamed": TTFT.removesuffix("_bucket") + "_count",
                 "unstreamed": E2E_UNSTREAMED.removesuffix("_bucket") + "_count"}
_FAMILY = {"ttft": "streamed", "tpot": "streamed", "e2e_unstreamed": "unstreamed",
           "tpot_unstreamed": "unstreamed"}
Z_95 = 1.959964  # two-sided 95 % normal quantile, as the gate's default confidence
P = "vllm_cutover:"


def _eq(label: str, value: str) -> str:
    return f'{label}="{value}"'


def recording_rules(selector: Selector, window: str = "30m",
                    criteria: GateCriteria | None = None) -> list[dict[str, str]]:
    """One rule group's rules; names end in the window (`...:30m`)."""
    c = criteria or GateCriteria()
    w = window

    def inc(name: str, *extra: str) -> str:
        return f"sum(increase({selector.series(name, *extra)}[{w}]))"

    det = ('deterministic="true"', 'outcome=~"match|diverged"')
    rules: list[dict[str, str]] = []
    for side, against in (("new_vs_old", "shadow"), ("old_vs_old", "baseline")):
        rules += [
            {"record": f"{P}compared:{side}:{w}",
             "expr": inc(COMPARISONS, _eq("against", against), *det)},
            {"record": f"{P}match_rate:{side}:{w}",
             "expr": "1 - " + inc(COMPARISONS, _eq("against", against), det[0],
                                  _eq("outcome", "diverged")) + f" / {P}compared:{side}:{w}"},
        ]
    p, n, z2 = f"{P}match_rate:new_vs_old:{w}", f"{P}compared:new_vs_old:{w}", Z_95 ** 2
    centre = f"({p} + {z2:.6f} / (2 * {n}))"
    half = f"{Z_95} * sqrt({p} * (1 - {p}) / {n} + {z2:.6f} / (4 * {n} ^ 2))"
    threshold = f"clamp_min({P}match_rate:old_vs_old:{w} - {c.max_excess_divergence:g}, 0)"
    rules += [
        {"record": f"{P}match_rate_lower:new_vs_old:{w}",
         "expr": f"({centre} - {half}) / (1 + {z2:.6f} / {n})"},
        {"record": f"{P}match_rate_upper:new_vs_old:{w}",
         "expr": f"({centre} + {half}) / (1 + {z2:.6f} / {n})"},
        {"record": f"{P}match_threshold:{w}", "expr": threshold},
        # 1 pass, -1 fail, 0 straddles; no sample: no series (an Argo query gets []).
        {"record": f"{P}match_check:{w}",
         "expr": f"((({P}match_rate_lower:new_vs_old:{w} - {P}match_threshold:{w}) >= bool 0)"
                 f" - (({P}match_rate_upper:new_vs_old:{w} - {P}match_threshold:{w}) < bool 0))"
                 f" and on() ({n} >= {c.min_samples})"},
    ]
    for family, series in FAMILY_COUNTS.items():
        # Successful answers of the family on either version: 0 makes its ratios n/a.
        rules.append({"record": f"{P}latency_samples:{family}:{w}",
                      "expr": inc(series, 'role=~"primary|shadow"')})
    for metric, series in LATENCY_HISTOGRAMS.items():
        for q, stat in ((0.5, "p50"), (0.99, "p99")):
            def quantile(role: str, q: float = q, series: str = series) -> str:
                matched = selector.series(series, _eq("role", role))
                return f"histogram_quantile({q}, sum by (le) (increase({matched}[{w}])))"
            rules.append({"record": f"{P}{metric}_{stat}_ratio:{w}",
                          "expr": f"{quantile('shadow')} / {quantile('primary')}"})
    for version, role in (("new", "shadow"), ("old", "primary")):
        rules.append({"record": f"{P}error_rate:{version}:{w}",
                      "expr": inc(REQUESTS, _eq("role", role), _eq("result", "error"))
                      + " / " + inc(REQUESTS, _eq("role", role))})
    shed = inc(DROPPED, f'reason=~"{"|".join(SHED_REASONS)}"')
    # No request shed has no series at all: 0, not an empty result.
    rules.append({"record": f"{P}coverage:{w}",
                  "expr": f"1 - ({shed} or vector(0)) / {inc(SAMPLED)}"})
    return rules


def rule_groups(selector: Selector, window: str = "30m", interval: str = "30s",
                criteria: GateCriteria | None = None) -> dict[str, Any]:
    return {"groups": [{"name": "vllm-cutover-gate", "interval": interval,
                        "rules": recording_rules(selector, window, criteria)}]}


def argo_metrics(address: str = "{{args.prometheus-address}}", window: str = "30m",
                 criteria: GateCriteria | None = None) -> list[dict[str, Any]]:
    """AnalysisTemplate `metrics` over the recorded series; an empty result (no rules, no
    samples yet) matches neither condition: Inconclusive, never Successful."""
    c = criteria or GateCriteria()
    some = "len(result) > 0 && "
    checks: list[tuple[str, str, str, str | None]] = [
        ("match-rate", f"{P}match_check:{window}", f"{some}result[0] == 1",
         f"{some}result[0] == -1")]
    for latency in LATENCY_HISTOGRAMS:
        limit = ratio_limit(c, latency, "p50")
        if limit is not None:
            checks.append((f"{latency.replace('_', '-')}-p50-ratio",
                           _applicable_ratio(latency, window),
                           f"{some}result[0] <= {limit:g}", f"{some}result[0] > {limit:g}"))
    checks += [
        ("error-rate", f"{P}error_rate:new:{window} - {P}error_rate:old:{window}",
         f"{some}result[0] <= {c.max_error_rate_excess:g}",
         f"{some}result[0] > {c.max_error_rate_excess:g}"),
        ("coverage", f"{P}coverage:{window}", f"{some}result[0] >= {c.min_coverage:g}", None)]
    metrics = []
    for name, query, success, failure in checks:
        metric: dict[str, Any] = {"name": name, **ARGO_SCHEDULE, "successCondition": success}
        if failure is not None:
            metric["failureCondition"] = failure
        metric["provider"] = {"prometheus": {"address": address, "query": query}}
        metrics.append(metric)
    return metrics


def ratio_limit(c: GateCriteria, metric: str, stat: str) -> float | None:
    """The gate's limit on `metric`'s `stat` ratio; an unstreamed metric without a limit of
    its own in `GateCriteria` takes its streamed counterpart's (same default, 1.10 at p50)."""
    own = f"max_{metric}_{stat}_ratio"
    if any(f.name == own for f in fields(c)):
        limit: float | None = getattr(c, own)
        return limit
    counterpart = {"e2e_unstreamed": "ttft", "tpot_unstreamed": "tpot"}[metric]
    return ratio_limit(c, counterpart, stat)


def _applicable_ratio(metric: str, window: str) -> str:
    """The ratio while its family (streamed or not) has samples; 0 (a pass: not applicable)
    while it has none and the other family has some, as the gate judges what the traffic
    has; nothing (Inconclusive) while neither has."""
    family = _FAMILY[metric]
    other = next(f for f in FAMILY_COUNTS if f != family)
    mine, theirs = f"{P}latency_samples:{family}:{window}", f"{P}latency_samples:{other}:{window}"
    return (f"({P}{metric}_p50_ratio:{window} and on() ({mine} > 0)) or on()"
            f" (vector(0) unless on() ({mine} > 0) and on() ({theirs} > 0))")


HEADER = "# Generated by `python -m proxy.fleet.rules` from proxy/fleet/rules.py: edit there.\n"
PROMETHEUS_ADDRESS = "http://prometheus-operated.monitoring.svc:9090"


def rendered_files() -> dict[str, str]:
    """Repository path -> text of every generated file."""
    import yaml

    def dump(data: Any) -> str:
        return HEADER + yaml.safe_dump(data, sort_keys=False, width=10_000)

    groups = rule_groups(parse_selector('{job="vllm-cutover"}'))
    template = {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisTemplate",
        "metadata": {"name": "vllm-cutover-gate-prometheus"},
        "spec": {"args": [{"name": "prometheus-address", "value": PROMETHEUS_ADDRESS}],
                 "metrics": argo_metrics()}}
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "vllm-cutover-gate",
                         "labels": {"app.kubernetes.io/name": "vllm-cutover"}},
            "spec": groups}
    return {"deploy/prometheus/vllm-cutover-rules.yml": dump(groups),
            "deploy/kubernetes/base/recording-rules.yaml": dump(rule),
            "deploy/kubernetes/argo-rollouts/analysis-prometheus.yaml": dump(template)}


def main() -> None:
    from pathlib import Path

    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    for path, text in rendered_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


if __name__ == "__main__":
    main()
