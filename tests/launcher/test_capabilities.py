"""The one capability table, and every consumer of it agreeing on each capability: the
rules (translate), the planner, the preflight report, `scan`, and `launch` (stderr and
--report-json). EXPECTED is read from vLLM's and FlashInfer's sources independently of
the table (see the module docstring of proxy/launcher/capabilities.py for the files)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from proxy.cli import main
from proxy.launcher import capabilities
from proxy.launcher.capabilities import FAMILY_NAME, KNOWN_CAPABILITIES, parse_capability
from proxy.launcher.command import Command
from proxy.launcher.planner import plan_launch
from proxy.launcher.preflight import run_preflight
from proxy.scan.findings import scan_text
from proxy.scan.rules_bridge import make_translate

# Capability -> (family, what `migrate` picks for a CUTLASS NVFP4 GEMM at vLLM 0.32).
# CuTe-DSL: vLLM needs major 10 and FlashInfer lists it; Thor under CUDA 12 (10.1) has no
# FlashInfer FP4 GEMM at all, so vLLM's CUTLASS (built for 10.1a) stays.
EXPECTED: dict[tuple[int, int], tuple[str, str]] = {
    (7, 0): ("unsupported", "marlin"), (7, 2): ("unsupported", "marlin"),
    (7, 5): ("marlin", "marlin"), (8, 0): ("marlin", "marlin"), (8, 6): ("marlin", "marlin"),
    (8, 7): ("marlin", "marlin"), (8, 8): ("marlin", "marlin"), (8, 9): ("marlin", "marlin"),
    (9, 0): ("marlin", "marlin"),
    (10, 0): ("sm100", "flashinfer_cutedsl"), (10, 3): ("sm100", "flashinfer_cutedsl"),
    (10, 7): ("sm100", "flashinfer_cutedsl"),
    (10, 1): ("sm110", "cutlass"), (11, 0): ("sm110", "flashinfer_cutlass"),
    (12, 0): ("sm120", "flashinfer_cutlass"), (12, 1): ("sm120", "flashinfer_cutlass"),
}
OLDER = sorted(cc for cc in KNOWN_CAPABILITIES if cc < (7, 0))
# vLLM's CMake CUDA_SUPPORTED_ARCHS (CUDA 12.8 and 13 branches) plus FlashInfer's 10.7.
VLLM_KNOWS = {(7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (10, 1),
              (10, 3), (11, 0), (12, 0), (12, 1), (10, 7)}
CUTEDSL_JSON = '"nvfp4_w4a4": "{}"'


def _others(family: str) -> list[str]:
    return [name for f, name in FAMILY_NAME.items() if f != family]


def test_every_capability_vllm_knows_is_in_the_table() -> None:
    assert VLLM_KNOWS <= set(EXPECTED) <= KNOWN_CAPABILITIES
    assert set(EXPECTED) | set(OLDER) == KNOWN_CAPABILITIES
    assert all(capabilities.family_of(cc) == "unsupported" for cc in OLDER)


@pytest.mark.parametrize("cc", sorted(EXPECTED))
def test_rules_and_planner_agree_with_the_sources(cc: tuple[int, int]) -> None:
    family, picked = EXPECTED[cc]
    assert capabilities.family_of(cc) == family
    command = Command("serve", ("vllm", "serve"), ("m", "--fp4-gemm-backend", "cutlass"))
    plan = plan_launch(command, {"VLLM_USE_FLASHINFER_MOE_FP4": "0"}, None,
                       target=Version("0.32.0"), compute_capability=cc, policy="migrate")
    assert plan.linear_backend == picked
    assert plan.moe_backend == ("cutlass" if family.startswith("sm") else "marlin")
    reasons = " ".join(c.reason for c in plan.changes)
    assert FAMILY_NAME[family] in reasons
    assert not [n for n in _others(family) if n in reasons.replace(
        FAMILY_NAME["sm100"] + ", " + FAMILY_NAME["sm110"] + ", " + FAMILY_NAME["sm120"], "")]


@pytest.mark.parametrize("cc", sorted(EXPECTED))
def test_preflight_and_scan_agree(cc: tuple[int, int]) -> None:
    family, picked = EXPECTED[cc]
    report = run_preflight(vllm_version="0.32.0", compute_capability=cc, linear_backend=picked,
                           moe_backend="flashinfer_cutlass", self_test=False)
    assert report.summary["gpu_family"] == family
    if picked.startswith("flashinfer"):
        assert report.summary["backend_supported"] is True  # FlashInfer runs what we pick
    moe = next(c for c in report.checks if c.name == "moe_backend")
    # vLLM runs FlashInfer's CUTLASS MoE on families 100 and 120, not on Thor (SM110).
    assert (moe.severity == "ok") == (family in ("sm100", "sm120")), moe
    translate = make_translate("0.32", "migrate", cc)
    [(finding, _plan)] = scan_text("s.sh", "shell", "vllm serve m --fp4-gemm-backend cutlass\n",
                                   translate)
    assert CUTEDSL_JSON.format(picked) in finding.fix
    assert FAMILY_NAME[family] in json.dumps(finding.to_json())  # type: ignore[index]


@pytest.mark.parametrize("cc", sorted(EXPECTED))
def test_launch_and_scan_commands_agree(cc: tuple[int, int], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    family, picked = EXPECTED[cc]
    report_path = tmp_path / "r.json"
    given = f"{cc[0]}.{cc[1]}"
    code = main(["launch", "--dry-run", "--no-validate", "--vllm-version", "0.32.0",
                 "--vllm-python", sys.executable, "--compute-capability", given,
                 "--report-json", str(report_path), "--", "vllm", "serve", "m",
                 "--fp4-gemm-backend", "cutlass"])
    err = capsys.readouterr().err
    assert code == 0, err
    report = json.loads(report_path.read_text())
    assert report["compute_capability"] == given
    assert report["preflight"]["summary"]["gpu_family"] == family
    assert FAMILY_NAME[family] in err  # type: ignore[index]
    assert CUTEDSL_JSON.format(picked) in " ".join(report["argv"])
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve m --fp4-gemm-backend cutlass\n")
    assert main(["scan", str(script), "--json", "--target-version", "0.32",
                 "--compute-capability", given]) == 1
    [row] = json.loads(capsys.readouterr().out)
    assert CUTEDSL_JSON.format(picked) in row["fix"] and FAMILY_NAME[family] in row["reason"]  # type: ignore[index]


@pytest.mark.parametrize(("text", "capability"), [
    ("10.0", (10, 0)), (" 12.1 ", (12, 1)), ("9.0", (9, 0)), ("7.5", (7, 5)), ("11.0", (11, 0)),
    ("10", (10, 0)), ("12", (12, 0)), ("9", (9, 0)),
])
def test_parse_capability(text: str, capability: tuple[int, int]) -> None:
    assert parse_capability(text) == capability


def test_every_known_capability_parses_as_printed() -> None:
    for cc in KNOWN_CAPABILITIES:
        assert parse_capability(capabilities.text(cc)) == cc


@pytest.mark.parametrize(("text", "why"), [
    ("99.9", "no GPU has"), ("10.9", "no GPU has"), ("0.0", "no GPU has"), ("13", "no GPU has"),
    ("4", "no GPU has"), ("10.", "expected MAJOR.MINOR"), ("sm100", "expected"),
    ("100", "expected"), ("10.0.1", "expected"), ("", "expected"), ("１０.０", "expected"),
])
def test_parse_capability_refuses_what_no_gpu_reports(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as refused:
        parse_capability(text)
    assert repr(text) in str(refused.value)


@pytest.mark.parametrize(("backend", "cc", "runs"), [
    ("cute-dsl", (12, 0), True), ("cute-dsl", (11, 0), False), ("trtllm", (12, 0), False),
    ("cutlass", (11, 0), True), ("cutlass", (10, 1), False), ("b12x", (10, 0), False),
    ("cudnn", (9, 0), False),
])
def test_mm_fp4_support_as_flashinfer_lists_it(backend: str, cc: tuple[int, int],
                                               runs: bool) -> None:
    assert capabilities.mm_fp4_supports(backend, cc) is runs


def test_launch_reads_a_bare_major_as_dot_zero_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report_path = tmp_path / "r.json"
    assert main(["launch", "--dry-run", "--no-validate", "--vllm-version", "0.32.0",
                 "--vllm-python", sys.executable, "--compute-capability", "10",
                 "--report-json", str(report_path), "--", "vllm", "serve", "m"]) == 0
    capsys.readouterr()
    report = json.loads(report_path.read_text())
    assert report["compute_capability"] == "10.0"
    assert report["preflight"]["summary"]["compute_capability"] == "10.0"
