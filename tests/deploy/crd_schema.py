"""Custom resources checked against their projects' own CRD schemas (tests/deploy/crds/,
vendored as published; SOURCES.md there names each file's repository, path, commit and
version), with `jsonschema`: types, enums, patterns, required fields.

A CRD's `openAPIV3Schema` lets the API server prune fields it does not know; `kubectl
apply` (strict field validation, its default) refuses them. So do we: every object that
lists its `properties` and neither allows `additionalProperties` nor preserves unknown
fields gets `additionalProperties: false`, and a misspelt field fails.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parent / "crds"


def _strict(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@cache
def schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the strict JSON schema of every served version."""
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if version.get("served"):
                    key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                    out[key] = _strict(version["schema"]["openAPIV3Schema"])
    return out


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """`path: message` of each way `obj` breaks its CRD's schema."""
    schema = schemas()[(obj["apiVersion"], obj["kind"])]
    validator = jsonschema.Draft4Validator(schema)
    return sorted(f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: "
                  f"{error.message}" for error in validator.iter_errors(obj))
