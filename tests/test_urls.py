"""Backend URLs: when two are one backend, and the setups refused because their evidence
would mean nothing (at the proxy's command line, its admin API and `cutover start`)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.urls import role_conflicts, same_backend, self_conflicts

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("a", "b", "same"), [
    ("http://127.0.0.1:8000", "http://localhost:8000/", True),
    ("http://u:pw@127.0.0.1:8000", "http://127.0.0.1:8000", True),
    ("HTTP://LOCALHOST:80", "http://127.0.0.1", True),
    ("https://127.0.0.1", "http://127.0.0.1:443", False),
    ("http://127.0.0.1:8000", "http://127.0.0.1:8001", False),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000", False),
    ("http://no-such-host.invalid:1", "http://NO-SUCH-HOST.invalid:1", True),
])
def test_same_backend_compares_scheme_resolved_host_port_path(a: str, b: str,
                                                              same: bool) -> None:
    assert same_backend(a, b) is same


def test_role_conflicts_name_both_sides() -> None:
    errors, warnings = role_conflicts("http://127.0.0.1:1", "http://localhost:1", None)
    assert warnings == [] and errors == [
        ("the shadow 'http://localhost:1' is the primary 'http://127.0.0.1:1': new would be "
        "compared with old itself")]
    errors, warnings = role_conflicts("http://a.invalid:1", "http://127.0.0.1:2",
                                      "http://localhost:2")
    assert "baseline 'http://localhost:2' is the shadow (new)" in errors[0]
    errors, warnings = role_conflicts("http://127.0.0.1:1", "http://127.0.0.1:2",
                                      "http://localhost:1")
    assert errors == [] and "within one engine" in warnings[0]


def test_the_proxy_refuses_a_shadow_that_is_its_primary(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "proxy", "proxy", "--port", "0", "--admin-port", "0",
            "--primary", "http://127.0.0.1:9", "--shadow", "http://localhost:9/",
            "--state-file", str(tmp_path / "s.json")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 3, done.stderr  # bad input
    assert "--shadow 'http://localhost:9' is the --primary 'http://127.0.0.1:9'" in done.stderr
    assert not (tmp_path / "s.json").exists()


def _imports(path: Path, package: str) -> set[str]:
    """The proxy modules `path` imports at module level (not inside functions)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = node.module
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.split(".")[0] == package}


def test_the_admin_and_url_modules_import_no_circle() -> None:
    """The cutover's admin reaches the mirror's only through what it is given, and the
    spec takes URLs from below both (issue 26)."""
    root = REPO_ROOT / "proxy"
    modules: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = _imports(path, "proxy")
    graph = {m: {d for d in deps if d in modules and d != m} for m, deps in modules.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, stack = set(), [start]
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                stack.extend(graph.get(node, ()))
        return False

    assert not reaches("proxy.cutover.shell.admin", "proxy.mirror.admin.api")
    assert not any(d.startswith("proxy.mirror") for d in graph["proxy.cutover.spec"])
    assert not any(d.startswith(("proxy.mirror", "proxy.cutover")) for d in graph["proxy.urls"])
    assert not any(d.startswith(("proxy.mirror", "proxy.cutover"))
                   for d in graph["proxy.adminhttp"])




def test_a_route_to_one_of_the_proxys_own_listeners_is_named() -> None:
    listeners = (("0.0.0.0", 8080), ("127.0.0.1", 9090))
    routes = {"primary": "http://127.0.0.1:8080", "shadow": "http://localhost:9090/v1",
              "baseline": "http://127.0.0.1:8081"}
    errors = self_conflicts(routes, listeners)
    assert [e.split(" ", 1)[0] for e in errors] == ["primary", "shadow"], errors
    # Another machine on the proxy's port, or a listener bound elsewhere, is not the proxy.
    assert not self_conflicts({"primary": "http://192.0.2.7:8080"}, listeners)
    assert not self_conflicts({"primary": "http://127.0.0.1:9090"}, (("10.255.255.1", 9090),))
