"""Three real proxies per fleet, mirroring to real simulated vLLMs (`vllm-cutover sim`),
and the reference verdict: the gate over the three proxies' records merged."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from proxy.evidence.store import SqliteStore
from proxy.fleet.promql import parse_selector
from proxy.fleet.rules import argo_metrics, rule_groups
from proxy.gate.tally import AdmissionCounts
from proxy.gate.verdict import GateCriteria, GateInputs, Verdict, evaluate
from tests.e2e.proxy_fixtures import RunningProxy, http_request, start_proxy, wait_for
from tests.e2e.servers import HOST, ServerProcess, free_port, spawn

# Engine-like pacing (the proxy times both sides alike at this pace, README "Latency").
PACE = ("--ttft-ms", "40", "--itl-ms", "8", "--natural-tokens", "10:24")
SLOW_AND_DIVERGING = ("--ttft-ms", "160", "--itl-ms", "32", "--natural-tokens", "10:24",
                      "--divergence-rate", "0.6")
# p99 ratios not judged: 150 requests on a shared two-core machine make a noisy tail.
# 150 a role: the anytime-valid output-length bound of identical lengths clears +-0.3 at
# about 114 pairs at 50 % confidence (60 were inconclusive).
CRITERIA = GateCriteria(max_excess_divergence=0.1, max_ttft_p50_ratio=1.3, max_tpot_p50_ratio=1.3,
                        max_ttft_p99_ratio=None, max_tpot_p99_ratio=None,
                        # a scene of 150 requests a role: its verdict at 50 %, errors not judged
                        confidence=0.5, max_error_rate_excess=1.0)
REQUESTS_PER_PROXY = 50


@contextmanager
def sim(work_dir: Path, name: str, knobs: Sequence[str]) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "proxy", "--log-level", "WARNING", "sim", "--host", HOST,
            "--port", str(port), *knobs]
    server: ServerProcess = spawn(argv, port=port, log_path=work_dir / f"sim-{name}.log")
    try:
        server.wait_ready(60)
        yield server.url
    finally:
        server.stop()


@contextmanager
def fleet(work_dir: Path, primary: str, shadow: str, baseline: str,
          count: int = 3) -> Iterator[list[RunningProxy]]:
    """`count` sidecars in front of the same old/new/baseline (replicas behind one LB)."""
    with ExitStack() as stack:
        yield [stack.enter_context(start_proxy(
            work_dir / f"proxy-{i}", primary, shadow, baseline,
            extra_args=("--capture-in-process", "--overload-lag-ms", "0")))
            for i in range(count)]


def send_traffic(proxies: Sequence[RunningProxy], per_proxy: int = REQUESTS_PER_PROXY,
                 stream: bool = True) -> None:
    """Deterministic completions (streamed or not), distinct prompts, four at a time per
    proxy."""
    def one(job: tuple[RunningProxy, int]) -> None:
        proxy, i = job
        answer = http_request("POST", proxy.url + "/v1/completions", {
            "model": "sim-model", "prompt": f"request {i} to {proxy.url}", "temperature": 0,
            "max_tokens": 32, "stream": stream})
        assert answer.status == 200, answer

    jobs = [(p, i) for p in proxies for i in range(per_proxy)]
    with ThreadPoolExecutor(max_workers=4 * len(proxies)) as pool:
        list(pool.map(one, jobs))
    for proxy in proxies:
        wait_for(lambda p=proxy: p.settled(per_proxy, ["shadow", "baseline"]), 60,
                 f"{proxy.url} records settled")


def merged_records_verdict(proxies: Sequence[RunningProxy],
                           criteria: GateCriteria = CRITERIA) -> tuple[Verdict, GateInputs]:
    """The reference: every proxy's records read back and judged as one store."""
    records, admission = [], AdmissionCounts()
    for proxy in proxies:
        store = SqliteStore(str(proxy.db_path))
        try:
            records.extend(store.records())
            counted = store.admission()
        finally:
            store.close()
        if counted is not None:
            shed = dict(admission.shed)
            for reason, n in counted.shed.items():
                shed[reason] = shed.get(reason, 0) + n
            admission = AdmissionCounts(admission.eligible + counted.eligible, shed)
    inputs = replace(GateInputs.from_records(records), admission=admission)
    return evaluate(inputs, criteria), inputs


def argo_prometheus_phases(prometheus_server: Any, job: str, work_dir: Path) -> dict[str, str]:
    """Load the recording rules for `job` (5 m window, evaluated every second) into the real
    Prometheus, then judge each Argo `prometheus` metric as Argo does: its query's vector
    as `result`, successCondition -> Successful, failureCondition -> Failed, else
    Inconclusive."""
    import yaml

    window = "5m"
    rules = rule_groups(parse_selector(f'{{job="{job}"}}'), window, "1s", CRITERIA)
    path = work_dir / f"{job}.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    prometheus_server.set_rule_files([str(path)])
    # Recorded series of an earlier job's rules keep their names: wait for evaluations of
    # these rules (the recorded sample's timestamp is its evaluation's).
    loaded = time.time()
    prometheus_server.wait_until(f"timestamp(vllm_cutover:coverage:{window}) > {loaded + 2:.3f}",
                                 timeout_s=30)
    phases = {}
    for metric in argo_metrics(window=window, criteria=CRITERIA):
        rows = prometheus_server.query(metric["provider"]["prometheus"]["query"])
        result = [float(row["value"][1]) for row in rows]
        if _argo_true(metric["successCondition"], result):
            phases[metric["name"]] = "Successful"
        elif "failureCondition" in metric and _argo_true(metric["failureCondition"], result):
            phases[metric["name"]] = "Failed"
        else:
            phases[metric["name"]] = "Inconclusive"
    return phases


def _argo_true(condition: str, result: list[float]) -> bool:
    """An Argo (expr-lang) condition of the forms we ship: `&&`, comparisons, len()."""
    python = condition.replace("&&", " and ").replace("true", "True")
    return bool(eval(python, {"__builtins__": {}, "len": len}, {"result": result}))


def targets(proxies: Sequence[RunningProxy]) -> list[str]:
    return [p.admin_url.split("://", 1)[1] for p in proxies]
