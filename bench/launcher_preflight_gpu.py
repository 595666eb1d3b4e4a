"""Exercise the launcher's preflight CUDA path on a real GPU and print its figures.

Run from the repository root on a CUDA host: `python bench/launcher_preflight_gpu.py`.
Prints one JSON document (and writes it to $OUT/preflight_gpu.json when OUT is set):
capability detection (torch and nvidia-smi) with its cost, the preflight for the
`migrate` choice on this GPU and for FlashInfer backends, and the torch NVFP4
reference self-test at several sizes, with CUDA timings next to the same work on the
CPU and a bf16 torch.mm as references measured in the same run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.launcher import nvfp4, preflight, probes, selftest

SCENARIOS: dict[str, dict[str, Any]] = {
    "migrate_marlin": {"vllm_version": "0.32.0", "linear_backend": "marlin", "moe_backend": None},
    "auto": {"vllm_version": "0.32.0", "linear_backend": None, "moe_backend": None},
    "flashinfer_cutedsl": {
        "vllm_version": "0.33.0",
        "linear_backend": "flashinfer_cutedsl",
        "moe_backend": "flashinfer_cutlass",
    },
    "flashinfer_cutlass_given_sm120": {
        "vllm_version": "0.32.0",
        "linear_backend": "flashinfer_cutlass",
        "moe_backend": None,
        "compute_capability": (12, 0),
    },
}
SIZES = [(128, 256, 512), (1024, 4096, 4096), (4096, 8192, 8192)]


def timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, round(time.perf_counter() - start, 4)


def cpu_reference_ms(m: int, n: int, k: int) -> dict[str, float]:
    """The same reference on the CPU (one run each: it is the slow side)."""
    import torch

    a = torch.randn((m, k)).to(torch.bfloat16)
    b = torch.randn((n, k)).to(torch.bfloat16)
    (qa, qb), quantize_s = timed(lambda: (nvfp4.quantize(a), nvfp4.quantize(b)))
    _, gemm_s = timed(lambda: nvfp4.reference_mm(qa, qb))
    return {"cpu_ref_quantize_ms": quantize_s * 1e3, "cpu_ref_gemm_ms": gemm_s * 1e3}


def fresh_detect_s(function: str) -> dict[str, Any]:
    """A detection in a fresh interpreter: what the launcher pays (torch import or not)."""
    code = (
        "import time; t = time.perf_counter(); "
        f"from proxy.launcher.preflight import {function} as d; "
        "cc = d(); print(cc, round(time.perf_counter() - t, 3))"
    )
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=False
    )
    return {"stdout": res.stdout.strip(), "stderr": res.stderr.strip()[-500:]}


def main() -> dict[str, Any]:
    out: dict[str, Any] = {
        name: [fresh_detect_s(name) for _ in range(3)]
        for name in ("detect_compute_capability", "detect_compute_capability_fast")
    }
    cc, out["detect_compute_capability_s"] = timed(preflight.detect_compute_capability)
    out["compute_capability"] = cc
    out["probe_torch"] = probes.probe_cuda().__dict__
    smi, out["probe_nvidia_smi_s"] = timed(lambda: probes._probe_nvidia_smi("forced"))
    out["probe_nvidia_smi"] = smi.__dict__
    out["preflight"] = {}
    for name, kw in SCENARIOS.items():
        args = {"compute_capability": cc, **kw}
        report, elapsed = timed(lambda a=args: preflight.run_preflight(self_test=False, **a))
        out["preflight"][name] = {
            "elapsed_s": elapsed,
            "ok": report.ok,
            "lines": report.lines(),
            "summary": report.summary,
        }
    report, elapsed = timed(
        lambda: preflight.run_preflight(
            vllm_version="0.32.0",
            compute_capability=cc,
            linear_backend="marlin",
            moe_backend=None,
            self_test=True,
        )
    )
    out["preflight_with_self_test"] = {"elapsed_s": elapsed, **report.to_json()}
    out["self_test_sizes"] = []
    for m, n, k in SIZES:
        result = selftest.run_self_test(
            compute_capability=cc, linear_backend="marlin", m=m, n=n, k=k
        )
        row = result.to_json()
        row["cpu"] = cpu_reference_ms(m, n, k) if m * n * k <= 2**34 else None
        out["self_test_sizes"].append(row)
    return out


if __name__ == "__main__":
    data = main()
    text = json.dumps(data, indent=1, default=str)
    print(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "preflight_gpu.json").write_text(text)
