"""Run the GPU lines of `verify` and `eval memory` (NVML) on a real GPU and print what they see.

Run from the repository root on a CUDA host: `python bench/evaluate_gpu.py`. The same
`verify` GPU line is evaluated idle and while torch keeps the GPU busy with bf16 matmuls
(the reference: torch's own `torch.cuda.utilization()`, read in the same run), with a
`--gpu-util-range` that the busy GPU should meet and the idle one should not. Prints one
JSON document (and writes it to $OUT/evaluate_gpu.json when OUT is set).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.evaluate import observe
from proxy.evaluate.checklist import VerifyOptions, _gpu_line

BUSY_RANGE = (50.0, 100.0)


def busy_gpu(stop: threading.Event) -> None:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while not stop.is_set():
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()


def sample(label: str) -> dict[str, Any]:
    import torch

    options = VerifyOptions(url="http://127.0.0.1:9", gpu_util_range=BUSY_RANGE)
    status, detail = _gpu_line(options)
    gpus = observe.nvml_gpus()
    return {"phase": label, "nvml": None if gpus is None else [asdict(g) for g in gpus],
            "verify_gpu_line": [status, detail],
            "torch_cuda_utilization": torch.cuda.utilization()}


def main() -> None:
    import torch

    torch.cuda.init()
    time.sleep(2.0)  # NVML's utilisation is averaged over its last sample period
    results = [sample("idle")]
    stop = threading.Event()
    worker = threading.Thread(target=busy_gpu, args=(stop,), daemon=True)
    worker.start()
    time.sleep(3.0)
    results.append(sample("busy"))
    stop.set()
    worker.join()
    doc = {"gpu_util_range": BUSY_RANGE, "samples": results}
    text = json.dumps(doc, indent=1)
    print(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "evaluate_gpu.json").write_text(text)


if __name__ == "__main__":
    main()
