"""The simulated vLLM OpenAI-compatible server: the aiohttp app factory.

`make_sim_app(config)` is all a test or the demo needs; `vllm-cutover sim`
only builds the config and runs it (see `proxy.sim.server`).
"""

from __future__ import annotations

import random

from aiohttp import web

from proxy.sim import info
from proxy.sim.agentic import responses_handler
from proxy.sim.completions import generation_handler
from proxy.sim.config import SimConfig
from proxy.sim.state import SIM_STATE, SimState
from proxy.sim.vocab import build_vocab

__all__ = ["SIM_STATE", "make_sim_app"]


def make_sim_app(config: SimConfig | None = None) -> web.Application:
    """A fresh simulator app (its own PRNG and counters)."""
    config = config or SimConfig()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SIM_STATE] = SimState(config=config, vocab=build_vocab(), rng=random.Random(config.seed))
    app.router.add_post("/v1/completions", generation_handler("completions"))
    app.router.add_post("/v1/chat/completions", generation_handler("chat"))
    app.router.add_post("/v1/responses", responses_handler)
    app.router.add_get("/health", info.health)
    app.router.add_get("/ping", info.health)
    app.router.add_post("/ping", info.health)
    app.router.add_get("/version", info.version)
    app.router.add_get("/v1/models", info.models)
    app.router.add_post("/tokenize", info.tokenize)
    app.router.add_post("/detokenize", info.detokenize)
    app.router.add_get("/metrics", info.metrics)
    return app
