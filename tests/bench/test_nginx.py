"""The bench's nginx configurations are valid for the installed nginx (`nginx -t`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from nginx import NginxKind, config_text, nginx_binary, write_config


@pytest.mark.parametrize("kind", ["plain", "streaming", "mirror", "mirror-headers"])
def test_every_kind_passes_nginx_own_check(tmp_path: Path, kind: NginxKind) -> None:
    binary = nginx_binary()
    if binary is None:
        pytest.skip("nginx not installed")
    conf = write_config(tmp_path, 18080, 18081, kind, (18082, 18083))
    check = subprocess.run([binary, "-t", "-c", str(conf), "-p", str(tmp_path), "-e",
                            str(tmp_path / "error.log")], capture_output=True, text=True,
                           check=False)
    assert check.returncode == 0, check.stderr


def test_mirror_kinds_differ_only_in_reading_the_mirrors_answers(tmp_path: Path) -> None:
    whole = config_text(tmp_path, 1, 2, "mirror", (3, 4))
    heads = config_text(tmp_path, 1, 2, "mirror-headers", (3, 4))
    for text in (whole, heads):
        assert "mirror /_mirror/mirror0;" in text and "mirror /_mirror/mirror1;" in text
        assert "mirror_request_body on;" in text and "server 127.0.0.1:4;" in text
    assert whole.count("proxy_store ") == 2 and "proxy_store" not in heads
    assert "mirror " not in config_text(tmp_path, 1, 2, "streaming")
    with pytest.raises(ValueError, match="'mirror' needs at least one mirror port"):
        config_text(tmp_path, 1, 2, "mirror")
