"""Per-app state of the simulator and the JSON response helpers its handlers share."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from proxy.sim.config import SimConfig
from proxy.sim.metrics import SimStats
from proxy.sim.render import error_body
from proxy.sim.request import Endpoint, RequestError, SamplingSpec, parse_request
from proxy.sim.vocab import Vocab

Fault = Literal["error", "reset", "garbage"]


@dataclass
class SimState:
    """Per-app mutable state: the fault/sampling PRNG and counters."""

    config: SimConfig
    vocab: Vocab
    rng: random.Random
    stats: SimStats = field(default_factory=SimStats)
    started_unix: float = field(default_factory=time.time)

    def draw_fault(self) -> Fault | None:
        # Always three draws, so the sequence does not depend on which rates are zero.
        err, reset, garbage = self.rng.random(), self.rng.random(), self.rng.random()
        if err < self.config.error_rate:
            return "error"
        if reset < self.config.reset_rate:
            return "reset"
        if garbage < self.config.garbage_rate:
            return "garbage"
        return None

    def ttft_delay_s(self) -> float:
        """Time to first token, with the configured tail share made slower."""
        delay = self.delay_s(self.config.ttft_ms)
        if self.config.ttft_tail_share and self.rng.random() < self.config.ttft_tail_share:
            delay *= self.config.ttft_tail_factor
        return delay

    def delay_s(self, ms: float) -> float:
        if ms <= 0:
            return 0.0
        jitter = self.config.jitter
        factor = self.rng.uniform(1 - jitter, 1 + jitter) if jitter else 1.0
        return ms * factor / 1000.0


SIM_STATE = web.AppKey("sim_state", SimState)


def json_response(body: object, status: int = 200) -> web.Response:
    try:
        data = json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        # A lone surrogate from the request (a model name echoed in a 404): vLLM's
        # JSONResponse fails the same way and its ValueError handler answers this 400.
        data = json.dumps(error_body(400, str(exc), "BadRequestError")).encode()
        status = 400
    return web.Response(body=data, status=status, content_type="application/json")


def error_response(
    status: int, message: str, error_type: str, param: str | None = None
) -> web.Response:
    return json_response(error_body(status, message, error_type, param), status)


async def read_spec(
    request: web.Request, endpoint: Endpoint, as_chat: Callable[[Any], Any] | None = None
) -> tuple[Any, SamplingSpec] | web.Response:
    """The JSON body and what it asks for, or the error vLLM answers (400, or 404 for
    another model). `as_chat` turns another API's body into a chat request first."""
    state = request.app[SIM_STATE]
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return error_response(400, f"Invalid JSON body: {exc}", "BadRequestError")
    try:
        wanted = as_chat(body) if as_chat is not None else body
        spec = parse_request(endpoint, wanted, state.vocab, state.config.max_model_len)
    except RequestError as exc:
        return error_response(exc.status, exc.message, exc.error_type, exc.param)
    if spec.model is not None and spec.model != state.config.model_name:
        return error_response(
            404, f"The model `{spec.model}` does not exist.", "NotFoundError", "model"
        )
    return body, spec
