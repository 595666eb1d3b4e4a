"""How often `eval perplexity`'s interval holds the true difference: its error rate.

Texts are drawn from one population (50-500 tokens, per-token NLL ~ N(8.65, 0.3), the new
engine's shifted per text by N(0.005, 0.02) nats); the true new - old perplexity is the
population's (two million texts). Each simulated set goes through the real
`paired_delta` (scipy's paired BCa bootstrap) and, as the reference, a plain percentile
bootstrap written here; printed: the share of sets whose 95 % interval holds the truth,
with its Wilson interval.

    python bench/perplexity_interval.py [--sets 300] [--texts 11,30,100]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.evaluate.perplexity import Scored, paired_delta
from proxy.gate.stats import wilson_interval


def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tokens = rng.integers(50, 500, n).astype(float)
    per_token = rng.normal(8.65, 0.3, n)
    return tokens, tokens * per_token, tokens * (per_token + rng.normal(0.005, 0.02, n))


def percentile_interval(rng: np.random.Generator, tokens: np.ndarray, old: np.ndarray,
                        new: np.ndarray, resamples: int = 2000) -> tuple[float, float]:
    pick = rng.integers(0, len(tokens), (resamples, len(tokens)))
    total = tokens[pick].sum(1)
    deltas = np.exp(new[pick].sum(1) / total) - np.exp(old[pick].sum(1) / total)
    return float(np.quantile(deltas, 0.025)), float(np.quantile(deltas, 0.975))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=int, default=300)
    parser.add_argument("--texts", default="11,30,100")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    tokens, old, new = draw(rng, 2_000_000)
    truth = math.exp(new.sum() / tokens.sum()) - math.exp(old.sum() / tokens.sum())
    print(f"true new - old perplexity {truth:.3f}; {args.sets} sets per row; 95 % intervals")
    for n in (int(v) for v in args.texts.split(",")):
        held = {"BCa (eval perplexity)": 0, "percentile (reference)": 0}
        for seed in range(args.sets):
            tokens, old, new = draw(rng, n)
            counts = tuple(int(t) for t in tokens)
            low, high = paired_delta(Scored("old", None, "-", tuple(old), counts),
                                     Scored("new", None, "-", tuple(new), counts),
                                     0.95, 2000, seed=seed).ci
            held["BCa (eval perplexity)"] += low <= truth <= high
            low, high = percentile_interval(rng, tokens, old, new)
            held["percentile (reference)"] += low <= truth <= high
        for name, k in held.items():
            low, high = wilson_interval(k, args.sets, 0.95)
            print(f"{n:4d} texts  {name:24s} coverage {k / args.sets:.3f} "
                  f"[{low:.3f}..{high:.3f}]")


if __name__ == "__main__":
    main()
