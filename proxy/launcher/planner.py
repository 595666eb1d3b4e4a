"""Plan a launch: (command, env, config, target, capability, policy) -> final args, env, changes.

Pure: values in, values out. Writing the config copy and exec'ing sit in
`proxy.launcher.execute`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from proxy.launcher.command import Command, FlagUse, find_flags
from proxy.launcher.config_file import ConfigFile, config_settings
from proxy.launcher.kernel_config import merge_kernel_config, parse_kernel_config
from proxy.launcher.rules import SOURCES, Policy
from proxy.launcher.translate import Change, Setting, translate

KERNEL_CONFIG = "--kernel-config"
CONFIG_KEYS = ("kernel-config", "kernel_config")
FLAG_NAMES = frozenset(
    [n for s in SOURCES if s.kind == "flag" for n in (s.name, *s.aliases)] + ["--config"]
)
ENV_NAMES = frozenset(s.name for s in SOURCES if s.kind == "env")
OWN_ENV_PREFIX = "VLLM_CUTOVER_"


@dataclass(frozen=True)
class Plan:
    """What the launcher will start. `config_contents` is set when a translated copy of the
    user's `--config` file must be written to `config_path` (which `args` already name)."""

    args: tuple[str, ...]  # vLLM's own arguments, after the entry prefix
    env: Mapping[str, str]
    changes: tuple[Change, ...]
    linear_backend: str | None
    moe_backend: str | None
    config_path: str | None = None
    config_contents: Mapping[str, Any] | None = field(default=None)

    @property
    def warnings(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.kind == "warning")


def _merged(existing: Any, added: str) -> Any:
    """Our NVFP4 entry added to a user's kernel config, in the user's form (JSON text, or a
    mapping in a YAML file); the user's was checked by `_check_kernel_configs`."""
    merged = merge_kernel_config(parse_kernel_config(existing), json.loads(added))
    return merged if isinstance(existing, dict) else json.dumps(merged)


def _check_kernel_configs(uses: list[FlagUse], config: ConfigFile | None) -> None:
    """Refuse a user's --kernel-config that vLLM would refuse or we could not merge with."""
    for use in uses:
        if use.name == KERNEL_CONFIG:
            parse_kernel_config(use.value or "")
    for key in CONFIG_KEYS:
        if config is not None and key in config.contents:
            parse_kernel_config(config.contents[key], f"--config {config.path!r}: {key}:")


def _set_config_key(contents: dict[str, Any], setting: Setting) -> None:
    value = setting.value or ""
    if setting.name == KERNEL_CONFIG[2:]:
        for key in CONFIG_KEYS:
            if key in contents:
                contents[key] = _merged(contents[key], value)
                return
    contents[setting.name] = value


def _apply_flags(
    args: list[str], uses: list[FlagUse], replace: dict[int, list[str]], append: list[Setting],
) -> tuple[list[str], list[Change]]:
    notes: list[Change] = []
    out: list[str] = []
    skip_until = -1
    by_index = {u.index: u for u in uses}
    for i, word in enumerate(args):
        if i < skip_until:
            continue
        use = by_index.get(i)
        if use is not None and use.index in replace:
            out.extend(replace[use.index])
            skip_until = i + use.width
            continue
        out.append(word)
    for setting in append:
        if setting.name == KERNEL_CONFIG:
            found = find_flags(out, frozenset([KERNEL_CONFIG]))
            if found:
                use = found[-1]
                merged = _merged(use.value or "", setting.value or "")
                out[use.index: use.index + use.width] = [KERNEL_CONFIG, merged]
                notes.append(Change("warning", shlex.join([KERNEL_CONFIG, use.value or ""]),
                                    shlex.join([KERNEL_CONFIG, merged]),
                                    "your --kernel-config is kept; the NVFP4 entry is added"))
                continue
        out.extend([setting.name] + ([] if setting.value is None else [setting.value]))
    return out, notes


def plan_launch(
    command: Command,
    env: Mapping[str, str],
    config: ConfigFile | None,
    *,
    target: Version,
    compute_capability: tuple[int, int] | None,
    policy: Policy,
    config_out_path: str | None = None,
) -> Plan:
    """Translate the FP4 settings of one start command for vLLM `target`."""
    args = list(command.args)
    uses = find_flags(args, FLAG_NAMES)
    flag_uses = [u for u in uses if u.name != "--config"]
    _check_kernel_configs(flag_uses, config)
    origin: dict[int, tuple[str, Any]] = {}
    settings: list[Setting] = []
    # Order = precedence among equals, as in vLLM: config file < command line.
    for setting in config_settings(config) if config else []:
        settings.append(setting)
        origin[id(setting)] = ("config", setting.name)
    for name in sorted(ENV_NAMES & env.keys()):
        settings.append(Setting("env", name, env[name]))
        origin[id(settings[-1])] = ("env", name)
    for use in flag_uses:
        settings.append(Setting("flag", use.name, use.value))
        origin[id(settings[-1])] = ("flag", use)
    result = translate(settings, target=target, policy=policy,
                       compute_capability=compute_capability)

    new_env = dict(env)
    contents = dict(config.contents) if config else {}
    replace: dict[int, list[str]] = {}
    append: list[Setting] = []
    additions: list[Setting] = []
    for action in result.actions:
        where, ref = origin[id(action.source)]
        tokens: list[str] = []
        for new in action.replacement:
            # A --kernel-config is merged with the user's own (argparse keeps only the last).
            if where == "flag" and new.kind == "flag" and new.name != KERNEL_CONFIG:
                tokens += [new.name] + ([] if new.value is None else [new.value])
            else:
                additions.append(new)
        if where == "flag":
            replace[ref.index] = tokens
        elif where == "env":
            new_env.pop(ref, None)
        else:
            contents.pop(ref, None)
    in_command = any(u.name == KERNEL_CONFIG for u in flag_uses)
    for new in additions:
        if new.kind == "env":
            new_env[new.name] = new.value or ""
        elif new.kind == "config" and in_command and new.name == KERNEL_CONFIG[2:]:
            # vLLM lets the command's --kernel-config replace the file's whole key.
            append.append(Setting("flag", KERNEL_CONFIG, new.value))
        elif new.kind == "config":
            _set_config_key(contents, new)
        else:
            append.append(new)
    final_args, notes = _apply_flags(args, flag_uses, replace, append)
    changes = list(result.changes) + notes
    for name in sorted(k for k in new_env if k.startswith(OWN_ENV_PREFIX)):
        changes.append(Change("env", f"{name}={shlex.quote(new_env.pop(name))}", None,
                              "vllm-cutover's own variable: vLLM (0.17+) would report it as an "
                              "unknown VLLM_* variable, an error with --fail-on-environ-validation"))

    config_path = None
    config_contents = None
    touched_config = any(origin[id(a.source)][0] == "config" for a in result.actions) or any(
        s.kind == "config" for s in additions)
    if config is not None and touched_config:
        config_path = config_out_path or config.path + ".vllm-cutover.yaml"
        config_contents = contents
        for use in find_flags(final_args, frozenset(["--config"])):
            final_args[use.index: use.index + use.width] = ["--config", config_path]
        changes.append(Change("flag", shlex.join(["--config", config.path]),
                              shlex.join(["--config", config_path]),
                              "deprecated keys translated into a new file; yours is unchanged"))
    return Plan(tuple(final_args), new_env, tuple(changes), result.linear_backend,
                result.moe_backend, config_path, config_contents)
