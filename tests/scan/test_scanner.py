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


def test_bytes_that_are_not_utf8_are_scanned_and_kept(tmp_path: Path, translate) -> None:
    script = tmp_path / "deploy.sh"
    script.write_bytes(b"#!/bin/sh\n# caf\xe9\nvllm serve m --fp4-gemm-backend cutlass\n")
    chart = tmp_path / "chart.yaml"  # PyYAML refuses the byte; the scan must not
    chart.write_bytes(b"# \xff\xfe\nargs: [--quantization, nvfp4, --name, 'caf\xe9']\n")
    report = scan_paths([tmp_path], translate, fix=True)
    assert report.scanned == 2 and not report.errors and not report.skipped
    assert {(Path(f.file).name, f.name, f.status) for f in report.findings} == {
        ("deploy.sh", "--fp4-gemm-backend", "fixable"), ("chart.yaml", "--quantization", "fixable")}
    assert script.read_bytes() == (b"#!/bin/sh\n# caf\xe9\n"
                                   b"vllm serve m --linear-backend flashinfer_cutlass\n")
    assert chart.read_bytes() == b"# \xff\xfe\nargs: [--name, 'caf\xe9']\n"
    assert scan_paths([tmp_path], translate).findings == []


def test_an_undecodable_byte_in_a_value_is_shown_as_a_replacement(tmp_path: Path,
                                                                   translate) -> None:
    (tmp_path / "run.sh").write_bytes(b"vllm serve m --fp4-gemm-backend cutl\xe9ss\n")
    [finding] = scan_paths([tmp_path], translate).findings
    assert finding.value == "cutl\ufffdss"


def test_files_not_read_are_reported(tmp_path: Path, translate) -> None:
    (tmp_path / "big.sh").write_bytes(b"vllm serve m --fp4-gemm-backend cutlass\n" + b"#" * 100)
    (tmp_path / "ok.sh").write_text("vllm serve m\n")
    report = scan_paths([tmp_path], translate, max_file_bytes=100)
    assert report.scanned == 1 and not report.findings
    assert [(Path(s.path).name, s.why) for s in report.skipped] == [
        ("big.sh", "140 bytes, over the 100-byte limit")]
    named = tmp_path / "model.bin"
    named.write_bytes(b"\0\1\2")
    assert [s.why for s in scan_paths([named], translate).skipped] == ["binary, not a text file"]
