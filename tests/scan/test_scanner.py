from __future__ import annotations

import shutil
from pathlib import Path

from proxy.scan.scanner import scan_paths

FIXTURES = Path(__file__).parent / "fixtures"


def _copy_fixtures(tmp_path: Path) -> Path:
    root = tmp_path / "deploy"
    shutil.copytree(FIXTURES, root)
    (root / ".git").mkdir()
    (root / ".git" / "serve.sh").write_text("vllm serve --fp4-gemm-backend cutlass\n")
    (root / "model.bin").write_bytes(b"\0\1--fp4-gemm-backend")
    return root


def test_directory_scan_finds_every_kind(tmp_path: Path, translate) -> None:
    root = _copy_fixtures(tmp_path)
    report = scan_paths([root], translate)
    files = {Path(r.path).name for r in report.files}
    assert files == {"docker-compose.yml", "k8s-deployment.yaml", "Dockerfile", "serve.sh",
                     "vllm.env", "vllm-config.yaml"}
    assert report.scanned == 6 and not report.errors


def test_fix_round_trip(tmp_path: Path, translate) -> None:
    root = _copy_fixtures(tmp_path)
    before = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    report = scan_paths([root], translate, fix=True)
    assert report.fixed and not report.errors
    for result in report.files:
        if result.backup:
            assert Path(result.backup).read_bytes() == before[Path(result.path).name]
    again = scan_paths([root], translate)
    assert all(f.status == "manual" for f in again.findings)
    assert len(again.findings) == len(report.findings) - len(report.fixed)
    # a second --fix changes nothing and writes no new backup
    third = scan_paths([root], translate, fix=True)
    assert not third.fixed
    assert not list(root.glob("*.bak.1"))


def test_broken_yaml_in_a_walk_is_a_warning_named_file_an_error(tmp_path: Path, translate) -> None:
    bad = tmp_path / "chart.yaml"
    bad.write_text("args: [--port\n")
    walked = scan_paths([tmp_path], translate)
    assert not walked.errors and walked.warnings
    named = scan_paths([bad], translate)
    assert named.errors and "not valid YAML" in named.errors[0]
    bad.write_text("args: [--fp4-gemm-backend, cutlass\n")
    [finding] = scan_paths([bad], translate).findings
    assert finding.status == "manual" and finding.value == "cutlass"


def test_fix_writes_through_a_symlink(tmp_path: Path, translate) -> None:
    real = tmp_path / "real.sh"
    real.write_text("vllm serve m --quantization nvfp4\n")
    link = tmp_path / "serve.sh"
    link.symlink_to(real)
    report = scan_paths([link], translate, fix=True)
    assert report.fixed and link.is_symlink()
    assert real.read_text() == "vllm serve m\n"
    assert (tmp_path / "real.sh.bak").read_text() == "vllm serve m --quantization nvfp4\n"
