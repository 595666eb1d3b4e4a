"""Property-based tests of `scan` on generated shell, YAML, Dockerfile and env text
(see tests/fuzzing.py): never a crash, `--fix` changes only lines with a fixed finding,
and a second `--fix` has nothing left to do."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from proxy.scan.rules_bridge import make_translate
from proxy.scan.scanner import ScanReport, scan_paths
from tests.fuzzing import fuzz_settings

pytestmark = pytest.mark.fuzz

TRANSLATES = {(target, policy, cc): make_translate(target, policy, cc)
              for target in ("0.22", "0.28", "0.32") for policy in ("migrate", "preserve")
              for cc in ((10, 0), (12, 0), (9, 0), None)}
FLAGS = ["--fp4-gemm-backend", "--fp4_gemm_backend", "--quantization", "--moe-runner-backend",
         "--linear-backend", "--moe-backend", "--kernel-config", "--port", "--max-model-len"]
VALUES = ["cutlass", "flashinfer_cutlass", "flashinfer-trtllm", "marlin", "nvfp4", "auto",
          "8000", "", "é", '{"linear_backend_per_quant": {"nvfp4_w4a4": "marlin"}}', "$X"]
ENV = ["VLLM_NVFP4_GEMM_BACKEND", "VLLM_USE_TRTLLM_FP4_GEMM", "VLLM_USE_FBGEMM",
       "VLLM_USE_FLASHINFER_MOE_FP4", "VLLM_FLASHINFER_MOE_BACKEND", "HF_HOME"]
ENV_VALUES = ["1", "0", "cutlass", "flashinfer-cutlass", "marlin", "latency", "", "x y"]
# Mostly what the rule table reads, so most files have something to fix.
GOOD = {"--fp4-gemm-backend": ["cutlass", "flashinfer_cutlass", "flashinfer-trtllm"],
        "--fp4_gemm_backend": ["cutlass", "flashinfer_cudnn"], "--quantization": ["nvfp4"],
        "--moe-runner-backend": ["flashinfer_cutlass", "triton", "cutlass"],
        "VLLM_NVFP4_GEMM_BACKEND": ["cutlass", "flashinfer-cutlass", "marlin"],
        "VLLM_USE_TRTLLM_FP4_GEMM": ["1", "0"], "VLLM_USE_FBGEMM": ["1", "0"],
        "VLLM_USE_FLASHINFER_MOE_FP4": ["1", "0"], "VLLM_FLASHINFER_MOE_BACKEND": ["latency"]}


def _value(draw: Any, name: str, anything: list[str]) -> str:
    good = GOOD.get(name)
    return draw(st.sampled_from(good if good and draw(st.integers(0, 3)) else anything))


# "\udce9": a Latin-1 byte in a UTF-8 file, as the file is read (surrogateescape).
JUNK = st.text(st.sampled_from(" \\'\"$#;&|=:-[]{}\t\nabc\udce9\ufffd"), max_size=6)
PROGRAMS = ["vllm serve m", "python3 -m vllm.entrypoints.openai.api_server --model m",
            "exec vllm serve \"$MODEL\"", "docker run --gpus all img", "echo"]


def _quoted(draw: Any, word: str) -> str:
    style = draw(st.sampled_from(["", "", "'", '"']))
    return f"{style}{word}{style}"


@st.composite
def command_words(draw: Any) -> list[str]:
    words: list[str] = []
    for _ in range(draw(st.integers(0, 4))):
        flag = draw(st.sampled_from(FLAGS))
        value = _value(draw, flag, VALUES)
        if draw(st.booleans()):
            words.append(_quoted(draw, f"{flag}={value}"))
        else:
            words += [flag, _quoted(draw, value)] if value else [flag]
    return words


@st.composite
def shell_text(draw: Any) -> str:
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["command", "command", "export", "comment", "junk"]))
        if kind == "command":
            prefix = [f"{n}={_quoted(draw, _value(draw, n, ENV_VALUES))}"
                      for n in draw(st.lists(st.sampled_from(ENV), max_size=2))]
            joiner = draw(st.sampled_from([" ", " \\\n    "]))
            words = [*prefix, draw(st.sampled_from(PROGRAMS)), *draw(command_words())]
            lines.append(joiner.join(words) + draw(st.sampled_from(["", " # note", " &&"])))
        elif kind == "export":
            name = draw(st.sampled_from(ENV))
            lines.append(f"export {name}={_quoted(draw, _value(draw, name, ENV_VALUES))}")
        else:
            lines.append(("# " if kind == "comment" else "") + draw(JUNK))
    return "\n".join(lines) + draw(st.sampled_from(["\n", ""]))


@st.composite
def yaml_text(draw: Any) -> str:
    container: dict[str, Any] = {"image": "vllm/vllm-openai"}
    words = draw(command_words())
    shape = draw(st.sampled_from(["list", "string", "args"]))
    if shape == "string":
        container["command"] = " ".join(["vllm", "serve", "m", *words])
    else:
        container["command" if shape == "list" else "args"] = ["vllm", "serve", "m", *words]
    pairs = [(n, _value(draw, n, ENV_VALUES))
             for n in draw(st.lists(st.sampled_from(ENV), max_size=3, unique=True))]
    if draw(st.booleans()):
        container["environment"] = dict(pairs)
        document: Any = {"services": {"vllm": container}}
    else:
        container["env"] = [{"name": n, "value": v} for n, v in pairs]
        document = {"spec": {"containers": [container]}}
    text = yaml.safe_dump(document, default_flow_style=draw(st.sampled_from([False, None])),
                          sort_keys=False, allow_unicode=True)
    if not draw(st.integers(0, 3)):  # a stray line, which may make the YAML invalid
        lines = text.splitlines()
        lines.insert(draw(st.integers(0, len(lines))), draw(JUNK).replace("\n", " "))
        text = "\n".join(lines) + "\n"
    return text


@st.composite
def dockerfile_text(draw: Any) -> str:
    lines = ["FROM vllm/vllm-openai"]
    for name in draw(st.lists(st.sampled_from(ENV), max_size=2)):
        value = _value(draw, name, ENV_VALUES)
        lines.append(f"ENV {name}={_quoted(draw, value)}" if draw(st.booleans())
                     else f"ENV {name} {value or 'x'}")
    words = ["vllm", "serve", "m", *draw(command_words())]
    if draw(st.booleans()):
        lines.append("CMD " + json.dumps(words))
    else:
        lines.append("ENTRYPOINT " + " \\\n  ".join(words))
    return "\n".join(lines) + "\n"


@st.composite
def env_text(draw: Any) -> str:
    lines = [f"{draw(st.sampled_from(['', 'export ']))}{n}="
             f"{_quoted(draw, _value(draw, n, ENV_VALUES))}"
             for n in draw(st.lists(st.sampled_from(ENV), max_size=4))]
    return "\n".join([*lines, "# " + draw(JUNK).replace("\n", " ")]) + "\n"


FILES = st.one_of(st.tuples(st.just("serve.sh"), shell_text()),
                  st.tuples(st.just("compose.yaml"), yaml_text()),
                  st.tuples(st.just("Dockerfile"), dockerfile_text()),
                  st.tuples(st.just("vllm.env"), env_text()))


def _kept_in_order(old: str, new: str, covered: set[int]) -> bool:
    """Whether every line of `old` outside `covered` is in `new`, unchanged and in order
    (a subsequence: greedy matching finds one when there is one)."""
    new_lines = iter(new.split("\n"))
    return all(any(line == candidate for candidate in new_lines)
               for number, line in enumerate(old.split("\n"), 1) if number not in covered)


def _emptied_env(old: str, new: str) -> list[str]:
    """Env keys (by service/container name) with entries before and none after the fix."""
    def envs(text: str) -> dict[str, object]:
        doc = yaml.safe_load(text) or {}
        units = list((doc.get("services") or {}).items()) if isinstance(doc, dict) else []
        return {name: unit.get(key) for name, unit in units if isinstance(unit, dict)
                for key in ("env", "environment") if key in unit}
    before, after = envs(old), envs(new)
    return [name for name, value in after.items() if before.get(name) and not value]


def _continued_lines(text: str, lines: set[int]) -> set[int]:
    """Every line of the shell lines (continued with a trailing backslash) holding one of
    `lines`: dropping the last words of one moves what follows onto the line before."""
    out: set[int] = set()
    group: list[int] = []
    for number, line in enumerate(text.split("\n"), 1):
        group.append(number)
        if not line.endswith("\\"):
            out |= set(group) if lines & set(group) else set()
            group = []
    return out


def _yaml_unit_lines(text: str, lines: set[int]) -> set[int]:
    """Every line of the YAML units holding one of `lines`: a scalar (rewritten whole when
    it cannot be edited in place), a flow list (`[a, b]` over lines) or a Kubernetes env
    entry (`- name: X` + `value: Y`)."""
    try:
        readable = text.replace("\udce9", "?")  # as the scanner masks it for PyYAML
        nodes = [n for n in yaml.compose_all(readable, Loader=yaml.SafeLoader) if n]
    except yaml.YAMLError:
        return set()
    out: set[int] = set()
    while nodes:
        node = nodes.pop()
        span = set(range(node.start_mark.line + 1, node.end_mark.line + 2))
        if isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False):
            out |= span if lines & span else set()
        elif isinstance(node, yaml.SequenceNode):
            nodes += node.value
            entries = [n for n in node.value if isinstance(n, yaml.MappingNode)]
            for entry in entries:
                entry_span = set(range(entry.start_mark.line + 1, entry.end_mark.line + 1))
                out |= entry_span if lines & entry_span else set()
        elif isinstance(node, yaml.MappingNode):
            nodes += [n for pair in node.value for n in pair]
    return out


def _scan(path: Path, translate: Any, fix: bool) -> ScanReport:
    return scan_paths([path], translate, fix=fix)


@fuzz_settings(500)
@given(FILES, st.sampled_from(sorted(TRANSLATES, key=str)))
def test_scan_and_fix_properties(file: tuple[str, str], setup: tuple[Any, ...]) -> None:
    name, text = file
    translate = TRANSLATES[setup]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        found = _scan(path, translate, fix=False)
        fixed = _scan(path, translate, fix=True)
        assert [f.to_json() for f in fixed.findings] == [f.to_json() for f in found.findings]
        new = path.read_bytes().decode("utf-8", "surrogateescape")
        fixed_lines = {f.line for f in fixed.fixed}
        assert (new != text) == bool(fixed.fixed)
        # A fix may reach the next line with text (a flag's value, a YAML env value),
        # the rest of a continued shell line, a YAML scalar or env entry.
        old_lines = text.split("\n")
        covered = {n for line in fixed_lines for n in range(line, len(old_lines) + 1)
                   if n == line or not "".join(old_lines[line:n - 1]).strip()}
        covered |= _continued_lines(text, fixed_lines) | _yaml_unit_lines(text, fixed_lines)
        # An env key whose every entry the fix removed goes with them (never left null).
        covered |= {n for n, line in enumerate(old_lines, 1)
                    if line.strip() in ("env:", "environment:") and line not in new.split("\n")}
        assert _kept_in_order(text, new, covered), (text, new)
        if name.endswith(".yaml") and new != text:
            assert not _emptied_env(text, new), (text, new)
        again = _scan(path, translate, fix=True)
        assert not again.fixed and path.read_bytes() == new.encode("utf-8", "surrogateescape")
        assert not again.skipped
        # What is still fixable was announced as not fixed, never left silently.
        if any(f.status == "fixable" for f in again.findings):
            assert fixed.errors or fixed.warnings, (text, new)
