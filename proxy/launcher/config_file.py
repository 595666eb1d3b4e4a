"""vLLM `--config FILE.yaml`: read it, list its keys as settings, write a translated copy.

The user's file is never edited: translated keys go to a new file that the final command
points to. vLLM requires the `.yaml`/`.yml` extension, so the copy keeps the original name.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.launcher.translate import Setting


class ConfigError(ValueError):
    """A `--config` file that cannot be read or is not a YAML mapping (the path is quoted)."""


@dataclass(frozen=True)
class ConfigFile:
    """A vLLM YAML config as read: `contents` keeps the user's key order and spelling."""

    path: str
    contents: Mapping[str, Any]


def read_config(path: str) -> ConfigFile:
    """Parse `path` with PyYAML's safe loader; an empty file is an empty mapping."""
    import yaml

    if not path.endswith((".yaml", ".yml")):
        raise ConfigError(f"--config {path!r}: vLLM only reads .yaml/.yml config files")
    try:
        # Non-blocking open: a FIFO would otherwise wait for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ConfigError(f"--config {path!r}: not a regular file")
        os.set_blocking(fd, True)
        with open(fd, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise ConfigError(f"--config {path!r}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path!r}: invalid YAML ({exc})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path!r}: expected a mapping of options, "
                          f"got {type(data).__name__}")
    return ConfigFile(path, data)


def config_value_text(value: Any) -> str | None:
    """A config value as vLLM turns it into a command-line word (dicts become JSON)."""
    if isinstance(value, bool) or value is None or isinstance(value, list):
        return None
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def config_settings(config: ConfigFile) -> list[Setting]:
    """Every scalar or mapping key of the file as a `config` setting, in file order."""
    out = []
    for key, value in config.contents.items():
        text = config_value_text(value)
        if text is not None:
            out.append(Setting("config", str(key), text))
    return out


def translated_path(original: str, out_dir: str) -> str:
    """Where the translated copy of `original` goes inside `out_dir`."""
    stem, ext = os.path.splitext(os.path.basename(original))
    return os.path.join(out_dir, f"{stem}.vllm-cutover{ext}")


def write_config(contents: Mapping[str, Any], path: str) -> None:
    """Write the translated copy (creating its directory)."""
    import yaml

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("# Written by vllm-cutover launch: deprecated FP4 keys translated.\n")
        yaml.safe_dump(dict(contents), handle, sort_keys=False, default_flow_style=False)
