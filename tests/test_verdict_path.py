"""The verdict from the gate to the cutover: typed on the way (no `Any` in a signature on
the path), the same JSON at the wire.

`gate_json_golden.json` holds the admin API's JSON of representative verdicts as it was
written before the verdict was typed end to end (regenerate only on purpose:
`python tests/test_verdict_path.py`): every key in its place and order, every value the
same (floats to 1e-9, the last bits may differ between builds of numpy/scipy).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args, get_type_hints

from proxy.credentials import redact_json
from proxy.cutover import control as cutover_control
from proxy.cutover import eta, phases
from proxy.evidence.window import EvidenceWindow
from proxy.gate import latency_checks
from proxy.gate import verdict as gate_module
from proxy.gate.checks import Check, Need
from proxy.gate.stats import LatencySamples
from proxy.gate.tally import Pairs
from proxy.gate.verdict import (
    AdmissionCounts,
    GateCriteria,
    GateFacts,
    GateInputs,
    MatchCounts,
    Verdict,
    analysis_body,
    evaluate,
)
from proxy.mirror import control, evidence, judging
from proxy.mirror.judging import GateResult, WindowFacts, evaluate_window
from proxy.mirror.worker import messages
from tests.evidence_records import BASE, NEW, OLD, SINCE, SPEEDS, record, store_of

GOLDEN = Path(__file__).with_name("gate_json_golden.json")


def _latency(seed: int, n: int, scale: float = 1.0) -> LatencySamples:
    rng = random.Random(seed)
    ttft = tuple(scale * rng.lognormvariate(-3.0, 0.2) for _ in range(n))
    tpot = tuple(scale * rng.lognormvariate(-4.5, 0.2) for _ in range(n))
    lengths = tuple(float(rng.randint(50, 150)) for _ in range(n))
    return LatencySamples(ttft_s=ttft, tpot_s=tpot, itl_s=tpot, e2e_s=ttft,
                          output_tokens=lengths)


def _inputs(n: int, paired: bool) -> GateInputs:
    """Old, a baseline and new on the same n requests; some shed, a few errors."""
    old, base, new = _latency(1, n), _latency(2, n), _latency(3, n, 1.05)
    pairs = {"output_tokens": Pairs(old.output_tokens, new.output_tokens, "request")}
    if paired:
        pairs |= {m: Pairs(base.metric(m), new.metric(m), "capture worker")
                  for m in ("ttft", "tpot")}
    return GateInputs(
        new_vs_old=MatchCounts(n, n // 40), baseline_vs_old=MatchCounts(n, n // 60),
        latency={"primary": old, "baseline": base, "shadow": new},
        requests={"primary": n, "baseline": n, "shadow": n},
        errors={"primary": 1, "baseline": 0, "shadow": 2},
        admission=AdmissionCounts(n + 40, {"queue_full": 30, "previous_response": 10}),
        pairs=pairs, paired=paired)


def _window_store_json(tmp_path: Path) -> dict[str, Any]:
    records = [record(SINCE + 1 + i / 100, OLD, NEW, ttft=SPEEDS, baseline=BASE,
                      diverged=i % 9 == 0, baseline_diverged=i % 17 == 0,
                      errors={NEW: "timeout"} if i == 5 else None)
               for i in range(80)]
    store = store_of(tmp_path, records)
    criteria = GateCriteria(min_samples=20, min_latency_samples=10)
    return evaluate_window(store, criteria, EvidenceWindow(SINCE, OLD, NEW, BASE))


def _cases(tmp_path: Path) -> dict[str, Any]:
    """What the admin API and the gate hooks answered for each case (as json_answer
    writes it: no key sorting, so the order is pinned too)."""
    cases: dict[str, Any] = {}
    few = evaluate(_inputs(30, paired=True), GateCriteria()).to_dict()
    cases["few_samples"] = few
    cases["paired_inconclusive"] = evaluate(_inputs(400, paired=True)).to_dict()
    cases["unpaired"] = evaluate(_inputs(600, paired=False),
                                 GateCriteria(min_samples=100)).to_dict()
    cases["no_baseline"] = evaluate(GateInputs(MatchCounts(10, 0)),
                                    GateCriteria(require_baseline=True)).to_dict()
    cases["analysis_body"] = analysis_body(cases["paired_inconclusive"])
    cases["window"] = _window_store_json(tmp_path)
    return {name: json.loads(json.dumps(redact_json(value), default=str))
            for name, value in cases.items()}


def _same(got: Any, want: Any, where: str = "$") -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {got!r} is not an object"
        assert list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for key in want:
            _same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-9,
                                                              abs_tol=1e-12), \
            f"{where}: {got!r} != {want!r}"
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"


def test_the_admin_json_of_a_verdict_is_what_it_was(tmp_path: Path) -> None:
    golden = json.loads(GOLDEN.read_text())
    got = _cases(tmp_path)
    assert list(got) == list(golden)
    for name in golden:
        _same(got[name], golden[name], name)


# The path of a verdict from the gate to the cutover: each of these takes and returns
# only typed values (`Any` stays at the wire: `GateResult.as_json`, `Verdict.details`).
PATH: list[object] = [
    gate_module.evaluate, gate_module._check_coverage, latency_checks.latency_checks,
    judging.judge_window, judging.current_verdict, judging._judge, messages.Reply,
    evidence.Evidence.gate, evidence.Evidence.window_gate,
    evidence.LocalEvidence.gate, evidence.LocalEvidence.window_gate,
    evidence.WorkerEvidence.gate, evidence.WorkerEvidence.window_gate,
    control.MirrorControl.gate, cutover_control.ProxyControl.gate, cutover_control.GateView,
    phases._estimate, phases.shadowing, eta.estimate, eta._hopeless,
]


def _anys(hint: object, where: str, seen: set[type], owner: str) -> Iterator[str]:
    """Where `Any` appears in `hint`, the fields of the project's dataclasses in it
    included (a `dict[str, Any]` one level down is as untyped as one on the surface)."""
    if hint is Any:
        yield where
        return
    for arg in get_args(hint):
        yield from _anys(arg, f"{where}[{getattr(arg, '__name__', arg)}]", seen, owner)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) \
            and hint.__module__.startswith(owner) and hint not in seen:
        seen.add(hint)
        for name, field_hint in get_type_hints(hint).items():
            yield from _anys(field_hint, f"{hint.__name__}.{name}", seen, owner)


def _path_anys(items: list[object], owner: str = "proxy.") -> tuple[list[str], set[type]]:
    found: list[str] = []
    seen: set[type] = set()
    for item in items:
        name = getattr(item, "__qualname__", repr(item))
        hints = get_type_hints(item)
        if not hints:
            found.append(f"{name}: no type hints")
        for param, hint in hints.items():
            found.extend(_anys(hint, f"{name}({param})", seen, owner))
    return found, seen


def test_no_any_between_the_gate_and_the_cutover() -> None:
    found, seen = _path_anys(PATH)
    assert not found, "Any on the gate -> cutover path:\n" + "\n".join(found)
    # the walk reached the values that carry the verdict, not only the surface
    assert {Verdict, Check, Need, GateFacts, GateResult, WindowFacts} <= seen


@dataclasses.dataclass
class _Holder:
    facts: dict[str, Any]


def _leaks(view: _Holder) -> list[_Holder]: ...


def test_the_signature_walk_finds_an_any_one_level_down() -> None:
    found, _ = _path_anys([_leaks], owner=__name__)
    assert found == ["_Holder.facts[Any]"]


if __name__ == "__main__":  # regenerate the golden file (on purpose only)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.write_text(json.dumps(_cases(Path(tmp)), indent=1) + "\n")
