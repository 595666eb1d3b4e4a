from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from proxy.cli import main

FIXTURES = Path(__file__).parents[1] / "scan" / "fixtures"


@pytest.fixture
def deploy(tmp_path: Path) -> Path:
    root = tmp_path / "deploy"
    shutil.copytree(FIXTURES, root)
    return root


def test_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


def test_bad_compute_capability_exits_2(deploy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(deploy), "--compute-capability", "sm100"]) == 2
    assert "'sm100'" in capsys.readouterr().err


def test_clean_tree_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "serve.sh").write_text("vllm serve m --linear-backend flashinfer_cutlass\n")
    assert main(["scan", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""


def test_findings_exit_1_with_file_line_lines(deploy: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(deploy / "serve.sh"), "--compute-capability", "10.0"]) == 1
    out = capsys.readouterr().out.splitlines()
    # the export reaches the vLLM command below it, whose --fp4-gemm-backend wins (as in launch)
    assert out[0].startswith(f"{deploy / 'serve.sh'}:6: found "
                             "VLLM_NVFP4_GEMM_BACKEND=flashinfer-cutlass -> fix remove it "
                             "(superseded by --fp4-gemm-backend cutlass")
    assert any(line.startswith(f"{deploy / 'serve.sh'}:13: found --quantization nvfp4 -> fix "
                               "remove it (") for line in out)


def test_json_output(deploy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(deploy), "--json", "--target-version", "0.21"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and rows
    keys = {"file", "line", "column", "kind", "name", "value", "fix", "reason", "status"}
    assert all(keys <= row.keys() for row in rows)
    k8s = [r for r in rows if r["file"].endswith("k8s-deployment.yaml")]
    assert {"line": 33, "column": 15, "kind": "flag", "name": "--fp4-gemm-backend",
            "value": "cutlass", "status": "manual"}.items() <= k8s[0].items()


def test_bad_target_version_exits_2(deploy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(deploy), "--target-version", "0.9"]) == 2
    assert "0.9" in capsys.readouterr().err


def test_fix_round_trip(deploy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    originals = {p.name: p.read_bytes() for p in deploy.iterdir()}
    compose = deploy / "docker-compose.yml"
    (deploy / "docker-compose.yml.bak").write_bytes(b"an older backup\n")
    assert main(["scan", str(deploy), "--fix", "--json", "--compute-capability", "12.0"]) == 1
    rows = json.loads(capsys.readouterr().out)
    fixed = [r for r in rows if r["status"] == "fixed"]
    assert fixed and all(r["status"] in ("fixed", "manual") for r in rows)
    assert (deploy / "docker-compose.yml.bak").read_bytes() == b"an older backup\n"
    backups = sorted(p.name for p in deploy.glob("*.bak*"))
    for name in backups:
        original = name.split(".bak")[0]
        if name != "docker-compose.yml.bak":
            assert (deploy / name).read_bytes() == originals[original]
    assert compose.read_bytes() != originals["docker-compose.yml"]
    # a re-scan finds only what needs a hand, and --fix has nothing more to do
    assert main(["scan", str(deploy), "--json", "--compute-capability", "12.0"]) == 1
    again = json.loads(capsys.readouterr().out)
    assert again and all(r["status"] == "manual" for r in again)
    assert len(again) == len(rows) - len(fixed)


def test_fix_everything_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve m \\\n  --fp4-gemm-backend cutlass \\\n  --quantization nvfp4\n")
    assert main(["scan", str(script), "--fix", "--target-version", "0.28",
                 "--compute-capability", "12.0"]) == 0
    assert script.read_text() == "vllm serve m \\\n  --linear-backend flashinfer_cutlass\n"
    assert (tmp_path / "serve.sh.bak").exists()
    assert main(["scan", str(script), "--target-version", "0.28"]) == 0
