"""Preflight: the no-CUDA path for real, the CUDA and FlashInfer branches with fake
torch / flashinfer modules injected into sys.modules."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.launcher import capabilities, preflight, probes
from proxy.launcher.preflight import PreflightReport, detect_compute_capability, run_preflight


def fake_torch(cc: tuple[int, int] | None, name: str = "NVIDIA Fake") -> types.ModuleType:
    module = types.ModuleType("torch")
    module.__version__ = "9.9.9+fake"  # type: ignore[attr-defined]
    module.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        is_available=lambda: cc is not None,
        device_count=lambda: 0 if cc is None else 1,
        get_device_capability=lambda index=0: cc,
        get_device_name=lambda index=0: name,
    )
    return module


def fake_flashinfer(supported: Callable[[str, int], bool], calls: list) -> types.ModuleType:
    module = types.ModuleType("flashinfer")
    module.__version__ = "0.7.0.post1"  # type: ignore[attr-defined]

    def mm_fp4(*args: object, **kwargs: object) -> None:
        raise AssertionError("preflight must not run kernels")

    def is_backend_supported(backend: str, cc: int) -> bool:
        calls.append((backend, cc))
        return supported(backend, cc)

    mm_fp4.is_backend_supported = is_backend_supported  # type: ignore[attr-defined]
    module.mm_fp4 = mm_fp4  # type: ignore[attr-defined]
    return module


def table_answer(backend: str, cc: int) -> bool:
    return cc in capabilities.MM_FP4_SUPPORT.get(backend, frozenset())


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list]:
    """Install a fake GPU (cc or None) and FlashInfer (version or None)."""

    def install(
        cc: tuple[int, int] | None,
        fi_version: str | None = "0.7.0.post1",
        supported: Callable[[str, int], bool] = table_answer,
    ) -> list:
        calls: list = []
        monkeypatch.setitem(sys.modules, "torch", fake_torch(cc))
        monkeypatch.setattr(probes.shutil, "which", lambda name: None)
        # A driver without nvidia-smi: the fast probe then asks (fake) torch.
        monkeypatch.setattr(probes, "DRIVER_PATHS", (__file__,))
        monkeypatch.setattr(probes, "flashinfer_version", lambda python=None: fi_version)
        fi = fake_flashinfer(supported, calls) if fi_version else None
        monkeypatch.setitem(sys.modules, "flashinfer", fi)
        return calls

    return install


def run(**overrides: object) -> PreflightReport:
    kwargs: dict = {
        "vllm_version": "0.32.0",
        "compute_capability": None,
        "linear_backend": None,
        "moe_backend": None,
        "self_test": False,
    }
    kwargs.update(overrides)
    return run_preflight(**kwargs)


def check(report: PreflightReport, name: str) -> preflight.Check:
    matches = [c for c in report.checks if c.name == name]
    assert len(matches) == 1, [c.name for c in report.checks]
    return matches[0]


def test_no_cuda_is_never_fatal(host: Callable[..., list]) -> None:
    host(None, fi_version=None)
    report = run(linear_backend="flashinfer_cutedsl", moe_backend="flashinfer_trtllm")
    assert report.ok
    cuda = check(report, "cuda")
    assert cuda.severity == "info"
    assert "no CUDA device: FP4 GEMM settings have no effect on this host" in cuda.message
    assert report.summary["cuda"] is False
    assert report.summary["vllm_kernel"].startswith("none: no CUDA device")


def test_no_cuda_with_given_capability_plans_but_does_not_enforce(
    host: Callable[..., list],
) -> None:
    host(None, fi_version=None)
    report = run(compute_capability=(10, 0), linear_backend="flashinfer_cutedsl")
    assert report.ok
    assert "given compute capability 10.0" in check(report, "cuda").message
    assert check(report, "flashinfer").severity == "warning"
    assert report.summary["backend_supported"] is True  # from the facts table
    assert check(report, "mm_fp4_backend").details["source"] == "FlashInfer 0.7 support table"


def test_flashinfer_missing_on_sm100_is_fatal_and_says_what_to_do(
    host: Callable[..., list],
) -> None:
    host((10, 0), fi_version=None)
    report = run(vllm_version="0.33.0", linear_backend="flashinfer_cutedsl")
    assert not report.ok
    fatal = check(report, "flashinfer")
    assert fatal.severity == "fatal"
    assert "install flashinfer-python==0.7.2.post1" in fatal.message
    assert "--policy preserve" in fatal.message
    assert report.fatal == (fatal,)
    assert any(line.startswith("preflight fatal flashinfer:") for line in report.lines())


def test_sm90_flashinfer_backend_is_fatal_with_marlin_advice(host: Callable[..., list]) -> None:
    calls = host((9, 0))
    report = run(linear_backend="flashinfer_cutlass")
    assert not report.ok
    mm = check(report, "mm_fp4_backend")
    assert mm.severity == "fatal"
    assert "--linear-backend marlin" in mm.message
    assert calls == [("cutlass", 90)]
    capability = check(report, "compute_capability")
    assert capability.severity == "warning"
    assert "Your GPU does not have native support for FP4 computation" in capability.message


def test_sm90_migrate_to_marlin_passes(host: Callable[..., list]) -> None:
    host((9, 0), fi_version=None)
    report = run(linear_backend="marlin")
    assert report.ok
    assert check(report, "cuda").severity == "ok"
    assert check(report, "linear_backend").severity == "ok"
    assert check(report, "flashinfer").severity == "info"
    assert "Marlin W4A16" in report.summary["vllm_kernel"]


def test_sm120_asks_flashinfer_with_its_capability_number(host: Callable[..., list]) -> None:
    calls = host((12, 0))
    report = run(linear_backend="flashinfer-cutedsl")
    assert report.ok
    assert calls == [("cute-dsl", 120)]
    assert check(report, "mm_fp4_backend").severity == "ok"
    assert report.summary["flashinfer_backend"] == "cute-dsl"
    assert report.summary["backend_supported"] is True


def test_unsupported_backend_suggests_the_ones_that_run_here(host: Callable[..., list]) -> None:
    host((12, 1), supported=lambda backend, cc: False)
    report = run(linear_backend="flashinfer_trtllm")
    mm = check(report, "mm_fp4_backend")
    assert mm.severity == "fatal"
    assert "flashinfer_cutlass" in mm.message and "flashinfer_trtllm:" in mm.message


@pytest.mark.parametrize(
    ("vllm", "installed", "severity", "text"),
    [
        ("0.32.0", "0.7.0.post1", "ok", "matches"),
        ("0.32.0", "0.7.4", "warning", "install flashinfer-python==0.7.0.post1"),
        ("0.22.1", "0.6.11.post2", "ok", "matches"),
        ("0.25.0", "0.7.4", "info", "no known FlashInfer pin for vLLM 0.25.0"),
    ],
)
def test_flashinfer_version_against_pin(
    host: Callable[..., list], vllm: str, installed: str, severity: str, text: str
) -> None:
    host((10, 0), fi_version=installed)
    found = check(run(vllm_version=vllm), "flashinfer_version")
    assert found.severity == severity
    assert text in found.message


@pytest.mark.parametrize(("vllm", "severity"), [("0.25.0", "fatal"), ("0.30.0", "warning")])
def test_cutlass_below_sm100_depends_on_vllm_fallback(
    host: Callable[..., list], vllm: str, severity: str
) -> None:
    host((9, 0))
    assert check(run(vllm_version=vllm, linear_backend="cutlass"), "linear_backend").severity == (
        severity
    )


@pytest.mark.parametrize(("cc", "severity"), [((10, 0), "ok"), ((12, 0), "fatal")])
def test_flashinfer_trtllm_moe_needs_sm100(
    host: Callable[..., list], cc: tuple[int, int], severity: str
) -> None:
    host(cc)
    assert check(run(moe_backend="flashinfer_trtllm"), "moe_backend").severity == severity


@pytest.mark.parametrize(("vllm", "instead"), [("0.33.0", "cutlass"), ("0.34.0", "marlin"),
                                              ("0.35.0", "marlin")])
def test_a_flashinfer_moe_on_thor_points_at_the_kernel_the_release_runs_there(
    host: Callable[..., list], vllm: str, instead: str
) -> None:
    host((11, 0))
    moe = check(run(vllm_version=vllm, moe_backend="flashinfer_cutlass"), "moe_backend")
    assert moe.severity == "fatal"
    assert moe.message.endswith(f"use --moe-backend {instead} or auto"), moe.message


def test_given_capability_that_differs_from_the_gpu_warns(host: Callable[..., list]) -> None:
    host((9, 0))
    report = run(compute_capability=(10, 0))
    assert check(report, "cuda").severity == "warning"
    assert report.summary["compute_capability"] == "10.0"


def test_detect_compute_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "torch", fake_torch((10, 3)))
    assert detect_compute_capability() == (10, 3)
    monkeypatch.setitem(sys.modules, "torch", fake_torch(None))
    assert detect_compute_capability() is None
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    assert detect_compute_capability() is None
    broken = fake_torch((9, 0))
    broken.cuda.get_device_capability = lambda index=0: (_ for _ in ()).throw(  # type: ignore[attr-defined]
        RuntimeError("driver too old")
    )
    monkeypatch.setitem(sys.modules, "torch", broken)
    probe = probes.probe_cuda()
    assert probe.capability is None and probe.error == "driver too old"


def test_nvidia_smi_fallback_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(probes.shutil, "which", lambda name: "/bin/nvidia-smi")

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        assert "--query-gpu=name,compute_cap" in cmd
        return subprocess.CompletedProcess(cmd, 0, stdout="NVIDIA H200, 9.0\n", stderr="")

    monkeypatch.setattr(probes.subprocess, "run", fake_run)
    probe = probes.probe_cuda()
    assert (probe.available, probe.capability, probe.source) == (True, (9, 0), "nvidia-smi")
    assert probe.device_name == "NVIDIA H200"


def test_mm_fp4_supported_falls_back_to_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    assert probes.mm_fp4_supported("cutlass", (10, 0)) == (True, "FlashInfer 0.7 support table")
    assert probes.mm_fp4_supported("trtllm", (12, 0))[0] is False


def test_to_json_is_serialisable_with_summary(host: Callable[..., list]) -> None:
    host((10, 0))
    data = json.loads(json.dumps(run(linear_backend="flashinfer_cutedsl").to_json()))
    assert data["ok"] is True
    assert set(data["summary"]) >= {
        "cuda",
        "compute_capability",
        "flashinfer_version",
        "flashinfer_pin",
        "backend_supported",
        "self_test",
    }
    assert data["summary"]["flashinfer_pin"] == "0.7.0.post1"
    assert all(set(c) == {"name", "severity", "message", "details"} for c in data["checks"])


def test_self_test_on_a_cpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(probes.shutil, "which", lambda name: None)
    monkeypatch.setattr(probes, "DRIVER_PATHS", ())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a GPU host
    report = run(self_test=True)  # real torch on the CPU
    found = check(report, "self_test")
    assert found.severity == "ok"
    assert report.summary["self_test"]["path"] == "torch-reference"
    assert report.summary["self_test"]["device"] == "cpu"


def test_importing_preflight_and_validate_stays_light() -> None:
    code = (
        "import sys, proxy.launcher.preflight, proxy.launcher.validate; "
        "print(sorted(m for m in ('torch', 'flashinfer', 'numpy') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert out.stdout.strip() == "[]"


def smi_answer(monkeypatch: pytest.MonkeyPatch, seen: list[list[str]]) -> None:
    monkeypatch.setattr(probes.shutil, "which", lambda name: "/bin/nvidia-smi")

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="NVIDIA B200, 10.0\n", stderr="")

    monkeypatch.setattr(probes.subprocess, "run", fake_run)


def test_fast_probe_uses_nvidia_smi_not_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    smi_answer(monkeypatch, seen)
    monkeypatch.setitem(sys.modules, "torch", fake_torch((9, 0)))  # would answer 9.0
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert preflight.detect_compute_capability_fast() == (10, 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc,3")
    assert probes.probe_cuda_fast().device_name == "NVIDIA B200"
    assert seen[-1][-1] == "--id=GPU-abc"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    hidden = probes.probe_cuda_fast()
    assert (hidden.available, hidden.error) == (False, "CUDA_VISIBLE_DEVICES hides every GPU")
    assert len(seen) == 2


def test_fast_probe_without_driver_never_asks_torch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(probes.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "torch", fake_torch((9, 0)))
    monkeypatch.setattr(probes, "DRIVER_PATHS", (str(tmp_path / "nvidiactl"),))
    probe = probes.probe_cuda_fast()
    assert (probe.available, probe.error) == (False, "no NVIDIA driver on this host")
    (tmp_path / "nvidiactl").write_text("")  # a driver but no nvidia-smi: ask torch
    assert preflight.detect_compute_capability_fast() == (9, 0)


def test_preflight_on_a_gpu_host_with_nvidia_smi_needs_no_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    smi_answer(monkeypatch, [])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # importing torch would fail
    monkeypatch.setattr(probes, "flashinfer_version", lambda python=None: None)
    report = run(linear_backend="cutlass")
    assert report.ok
    assert check(report, "cuda").message.endswith("(via nvidia-smi)")
    assert report.summary["compute_capability"] == "10.0"
    assert report.summary["torch"] is None


def test_planning_without_a_gpu_uses_the_table_not_flashinfer(host: Callable[..., list]) -> None:
    calls = host(None, fi_version="0.7.4")
    report = run(compute_capability=(12, 0), linear_backend="flashinfer_trtllm")
    assert calls == []  # importing flashinfer costs seconds; its answer is not needed here
    mm = check(report, "mm_fp4_backend")
    assert mm.severity == "warning"  # not fatal: no GPU on this host
    assert mm.details["source"] == "FlashInfer 0.7 support table"


def test_flashinfer_is_looked_up_for_the_interpreter_that_runs_vllm(tmp_path: Path) -> None:
    """The launcher may run in another venv than vLLM: vLLM's FlashInfer is the one that counts."""
    other_python = tmp_path / "python"
    other_python.write_text("#!/bin/sh\necho 0.6.18\n")
    other_python.chmod(0o755)
    assert probes.flashinfer_version(str(other_python)) == "0.6.18"
    empty_python = tmp_path / "python-without-flashinfer"
    empty_python.write_text("#!/bin/sh\nexit 0\n")
    empty_python.chmod(0o755)
    assert probes.flashinfer_version(str(empty_python)) is None
    assert probes.is_this_interpreter(sys.executable) and probes.is_this_interpreter(None)
    assert not probes.is_this_interpreter(str(other_python))
    report = run_preflight(vllm_version="0.29.0", compute_capability=(10, 0),
                           linear_backend="flashinfer_cutlass", moe_backend=None,
                           self_test=False, vllm_python=str(other_python))
    assert report.summary["flashinfer_version"] == "0.6.18"
    assert report.summary["flashinfer_pin"] == "0.6.18"
