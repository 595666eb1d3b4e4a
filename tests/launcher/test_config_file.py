"""Reading a vLLM --config YAML, its keys as settings, and the translated copy."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxy.launcher.config_file import (
    ConfigError,
    ConfigFile,
    config_settings,
    read_config,
    translated_path,
    write_config,
)
from proxy.launcher.translate import Setting


def test_read_and_list_settings(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text("port: 8000\nfp4_gemm_backend: cutlass\nenforce-eager: true\n"
                    "kernel-config:\n  linear_backend_per_quant:\n    nvfp4_w4a4: marlin\n")
    config = read_config(str(path))
    assert list(config.contents) == ["port", "fp4_gemm_backend", "enforce-eager", "kernel-config"]
    assert config_settings(config) == [
        Setting("config", "port", "8000"),
        Setting("config", "fp4_gemm_backend", "cutlass"),
        Setting("config", "kernel-config", '{"linear_backend_per_quant": {"nvfp4_w4a4": "marlin"}}'),
    ]


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.yaml", "port: [1, 2\n", "invalid YAML"),
    ("list.yaml", "- a\n- b\n", "expected a mapping"),
    ("serve.json", "{}", "only reads .yaml"),
])
def test_bad_files_are_clear_errors(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_config(str(path))


def test_missing_file_quotes_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml"):
        read_config(str(tmp_path / "nope.yaml"))


def test_empty_file_is_empty_mapping(tmp_path: Path) -> None:
    path = tmp_path / "empty.yml"
    path.write_text("")
    assert read_config(str(path)).contents == {}


def test_write_copy_keeps_extension_and_order(tmp_path: Path) -> None:
    out = translated_path("/etc/vllm/serve.yml", str(tmp_path / "out"))
    assert out.endswith("serve.vllm-cutover.yml")
    write_config(ConfigFile(out, {"b": 1, "a": "x"}).contents, out)
    text = Path(out).read_text()
    assert text.startswith("# Written by vllm-cutover")
    assert list(yaml.safe_load(text)) == ["b", "a"]
