from __future__ import annotations

import json
import os
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


def test_missing_path_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(tmp_path / "nope")]) == 3
    assert "nope" in capsys.readouterr().err


@pytest.mark.parametrize("capability", ["sm100", "99.9", "13", "100", ""])
def test_bad_compute_capability_exits_3(capability: str, deploy: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(deploy), "--compute-capability", capability]) == 3
    assert repr(capability) in capsys.readouterr().err


def test_a_bare_major_is_its_dot_zero_as_in_launch(deploy: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # the same parser as launch: "12" is 12.0 for both
    outputs = []
    for given in ("12", "12.0"):
        assert main(["scan", str(deploy), "--json", "--compute-capability", given]) == 1
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and "flashinfer_cutlass" in outputs[0]


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


def test_bad_target_version_exits_3(deploy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(deploy), "--target-version", "banana"]) == 3
    assert "'banana'" in capsys.readouterr().err
    assert main(["scan", str(deploy), "--target-version", "0.9", "--strict-versions"]) == 3
    assert "vLLM 0.9 is older than the launcher's tables (0.10.0 .. 0.34.x) and " \
        "--strict-versions refuses it" in capsys.readouterr().err


def test_a_target_outside_the_tables_is_scanned(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain.sh"
    plain.write_text("vllm serve m --max-model-len 4096\n")
    for target in ("0.35.0", "0.9.2"):
        assert main(["scan", str(plain), "--target-version", target]) == 0
        captured = capsys.readouterr()
        assert captured.out == ""
        assert "the command and its environment hold nothing they match, so nothing needs a " \
            "change" in captured.err
    seed = tmp_path / "seed.sh"
    seed.write_text("vllm serve m --fp4-gemm-backend cutlass\n")
    assert main(["scan", str(seed), "--target-version", "0.35.0", "--compute-capability",
                 "12.0"]) == 1
    captured = capsys.readouterr()
    assert "fix --kernel-config '{\"linear_backend_per_quant\": {\"nvfp4_w4a4\": " \
        "\"flashinfer_cutlass\"}}'" in captured.out
    assert "warning: vLLM 0.35.0 is newer than the launcher's tables (0.10.0 .. 0.34.x): the " \
        "FP4 settings were translated to the forms of vLLM 0.34.0" in captured.err


def test_fix_round_trip(deploy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    originals = {p.name: p.read_bytes() for p in deploy.iterdir()}
    compose = deploy / "docker-compose.yml"
    (deploy / "docker-compose.yml.bak").write_bytes(b"an older backup\n")
    assert main(["scan", str(deploy), "--fix", "--bump-image", "--json",
                 "--compute-capability", "12.0"]) == 1
    rows = json.loads(capsys.readouterr().out)
    fixed = [r for r in rows if r["status"] == "fixed"]
    # the fixtures' images run vLLM 0.21.0: bumped with the flags, to the default target
    assert {r["fix"] for r in rows if r["kind"] == "image"} == {"vllm/vllm-openai:v0.34.0"}
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


def test_a_stray_byte_does_not_hide_a_file(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "deploy.sh").write_bytes(
        b"#!/bin/sh\n# caf\xe9\nvllm serve m --fp4-gemm-backend cutlass\n")
    assert main(["scan", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert f"{tmp_path / 'deploy.sh'}:3: found --fp4-gemm-backend cutlass" in captured.out
    assert "1 finding(s) in 1 of 1 file(s)" in captured.err


def test_a_skipped_file_fails_the_gate_unless_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "serve.sh").write_text("vllm serve m --fp4-gemm-backend cutlass\n")
    root = tmp_path / "deploy"
    root.mkdir()
    (root / "serve.sh").symlink_to(outside / "serve.sh")
    (root / os.fsdecode(b"big\xe9.sh")).write_text("vllm serve m\n" + "#" * 64)
    assert main(["scan", str(root), "--max-file-bytes", "64"]) == 2
    err = capsys.readouterr().err
    assert f"skipped {root}/big\\xe9.sh: 77 bytes, over the 64-byte limit" in err
    assert f"skipped {root / 'serve.sh'}: symlink to {outside / 'serve.sh'}, outside" in err
    assert "0 finding(s) in 0 of 0 file(s)" in err and "2 file(s) skipped, not read" in err
    assert main(["scan", str(root), "--max-file-bytes", "64", "--json", "--allow-skipped"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["file"], r["status"]) for r in rows] == [
        (f"{root}/big\\xe9.sh", "skipped"), (str(root / "serve.sh"), "skipped")]
    with pytest.raises(SystemExit) as exited:
        main(["scan", str(root), "--max-file-bytes", "0"])
    assert exited.value.code == 3 and "'0'" in capsys.readouterr().err
