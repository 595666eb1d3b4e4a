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
