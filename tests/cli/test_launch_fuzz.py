"""Property-based tests of `launch`'s argv/env/config translation (see tests/fuzzing.py).

Random vLLM commands (flag orders, `=` forms, repeated flags, unicode, undecodable argv
bytes), environments and config files: the planner either plans or raises one of the
errors the CLI turns into exit 3 (bad input), and the CLI's dry run exits 0 or 3, never a traceback.
"""

from __future__ import annotations

import io
import os
import shlex
import sys
from contextlib import redirect_stderr, redirect_stdout
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from proxy.cli import main
from proxy.launcher.capabilities import KNOWN_CAPABILITIES
from proxy.launcher.command import CommandError, parse_command
from proxy.launcher.config_file import ConfigError, ConfigFile
from proxy.launcher.kernel_config import KernelConfigError
from proxy.launcher.planner import plan_launch
from proxy.launcher.rules import SOURCES
from proxy.launcher.translate import TranslationError
from tests.fuzzing import fuzz_settings

pytestmark = pytest.mark.fuzz

CLEAN_EXIT_ERRORS = (CommandError, ConfigError, KernelConfigError, TranslationError)
FLAGS = ["--fp4-gemm-backend", "--fp4_gemm_backend", "--quantization", "-q", "--kernel-config",
         "--kernel_config", "--linear-backend", "--moe-runner-backend", "--moe-backend",
         "--port", "--max-model-len", "--served-model-name"]
KNOWN_VALUES = sorted({v for s in SOURCES for v, _ in (s.values or ())} | {
    "marlin", "flashinfer_cutedsl", "FlashInfer-CUTLASS", "AUTO", "", "8000", "é", "🙂",
    "\udce9", '{"linear_backend_per_quant": {"nvfp4_w4a4": "marlin"}}', "{}", "[]", "{not",
    '{"linear_backend_per_quant": null}', '{"moe_backend": "marlin"}', "-1", "--", "="})
# What argv and the environment can carry: no NUL, no surrogate but those an undecodable
# byte becomes (one is in KNOWN_VALUES).
VALUES = st.one_of(st.sampled_from(KNOWN_VALUES), st.text(
    st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=8))
KERNEL_CONFIGS = ['{"linear_backend_per_quant": {"nvfp4_w4a4": "marlin"}}', "{}",
                  '{"moe_backend": "marlin"}', '{"linear_backend_per_quant": null}']
# Mostly values the rule table reads, so most commands plan; the rest is anything.
GOOD_VALUES = {name: [v for v, _ in (s.values or ())] or ["marlin", "flashinfer_cutlass"]
               for s in SOURCES for name in (s.name, *s.aliases)}
GOOD_VALUES.update({"--kernel-config": KERNEL_CONFIGS, "--port": ["8000"]})
ENV_NAMES = sorted({s.name for s in SOURCES if s.kind == "env"} | {"VLLM_CUTOVER_X"})


def value_for(name: str) -> st.SearchStrategy[str]:
    good = GOOD_VALUES.get(name.replace("_", "-") if name.startswith("--") else name)
    return VALUES if not good else st.one_of(*[st.sampled_from(good)] * 4, VALUES)
VERSIONS = ["0.10.0", "0.10.1", "0.11.1", "0.17.0", "0.22.0", "0.24.0", "0.28.0", "0.30.0",
            "0.32.0", "0.33.1"]
CAPABILITIES = st.one_of(st.none(), st.sampled_from(sorted(KNOWN_CAPABILITIES)))


@st.composite
def vllm_args(draw: Any) -> list[str]:
    """A model, then flags in any order: `--x v`, `--x=v`, bare, repeated; stray words."""
    words = [draw(st.sampled_from(["m", "org/Model-FP4", "é", "caf\udce9"]))]
    for _ in range(draw(st.integers(0, 6))):
        flag = draw(st.sampled_from(FLAGS))
        value = draw(value_for(flag))
        form = draw(st.sampled_from(["pair", "pair", "pair", "equals", "equals", "bare", "word"]))
        words += {"pair": [flag, value], "equals": [f"{flag}={value}"], "bare": [flag],
                  "word": [value]}[form]
    return words


ENVS = st.lists(st.sampled_from(ENV_NAMES).flatmap(
    lambda name: st.tuples(st.just(name), value_for(name))), max_size=4).map(dict)
CONFIGS = st.one_of(st.none(), st.dictionaries(
    st.sampled_from(["fp4-gemm-backend", "fp4_gemm_backend", "kernel-config", "kernel_config",
                     "quantization", "moe-runner-backend", "port"]),
    st.one_of(VALUES, st.integers(), st.booleans(), st.none(), st.lists(VALUES, max_size=2),
              st.dictionaries(st.sampled_from(["linear_backend_per_quant", "nvfp4_w4a4"]),
                              st.one_of(VALUES, st.dictionaries(VALUES, VALUES, max_size=2)),
                              max_size=2)),
    max_size=3))


@fuzz_settings(800)
@given(vllm_args(), ENVS, CONFIGS, st.sampled_from(VERSIONS), CAPABILITIES,
       st.sampled_from(["migrate", "preserve"]))
def test_the_planner_plans_or_refuses_cleanly(args: list[str], env: dict[str, str],
                                               contents: dict[str, Any] | None, version: str,
                                               capability: tuple[int, int] | None,
                                               policy: Any) -> None:
    config = None if contents is None else ConfigFile("c.yaml", contents)
    words = ["vllm", "serve", *args] + (["--config", "c.yaml"] if config else [])
    try:
        command = parse_command(words, is_program=lambda w: False)
        plan = plan_launch(command, env, config, target=Version(version),
                           compute_capability=capability, policy=policy,
                           config_out_path="out/c.vllm-cutover.yaml")
    except CLEAN_EXIT_ERRORS as err:
        assert str(err)
        return
    given_kernel_configs = sum(w.split("=")[0] in ("--kernel-config", "--kernel_config")
                               for w in args)
    final_kernel_configs = sum(w.split("=")[0] in ("--kernel-config", "--kernel_config")
                               for w in plan.args)
    assert final_kernel_configs <= max(1, given_kernel_configs)  # ours is merged, not added
    assert not {"--fp4-gemm-backend", "--fp4_gemm_backend", "--moe-runner-backend"} & {
        w.split("=")[0] for w in plan.args}
    assert not any(k.startswith("VLLM_CUTOVER_") for k in plan.env)
    # What the launcher starts, launched again, is left as it is.
    config_again = None if config is None else ConfigFile("out/c.vllm-cutover.yaml", (
        config.contents if plan.config_contents is None else plan.config_contents))
    again = plan_launch(parse_command(["vllm", "serve", *plan.args], is_program=lambda w: False),
                        plan.env, config_again, target=Version(version),
                        compute_capability=capability, policy=policy,
                        config_out_path="again/c.vllm-cutover.yaml")
    assert (again.args, dict(again.env)) == (plan.args, dict(plan.env))
    assert again.config_contents is None


@fuzz_settings(300)
@given(vllm_args(), ENVS, st.sampled_from(VERSIONS),
       st.one_of(st.none(), st.sampled_from(["10.0", "12.0", "9.0", "99.9", "10", "x"])))
def test_a_dry_run_exits_0_or_3_never_a_traceback(args: list[str], env: dict[str, str],
                                                  version: str, capability: str | None) -> None:
    argv = ["launch", "--dry-run", "--no-validate", "--no-preflight", "--vllm-version",
            version, "--vllm-python", sys.executable]
    argv += ["--compute-capability", capability] if capability is not None else []
    # A strict UTF-8 stdout, as in a UTF-8 locale: argv bytes that are not UTF-8 arrive
    # as lone surrogates and must still print.
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    err = io.StringIO()
    with mock.patch.dict(os.environ, env), redirect_stdout(out), redirect_stderr(err):
        code = main([*argv, "--", "vllm", "serve", *args])
    if code == 3:  # bad input
        assert err.getvalue().startswith("vllm-cutover launch: error: "), err.getvalue()
        return
    assert code == 0, err.getvalue()
    printed = os.fsdecode(out.buffer.getvalue())  # type: ignore[attr-defined]
    words = shlex.split(printed)  # the dry run's stdout is the command alone
    assert words[words.index("serve") - 1:][:2] == ["vllm", "serve"]
    assert words[words.index("serve") + 1] == args[0]
