"""No import circles in `proxy/`, and no import reaches up the layer order.

Every `import` statement counts, at module level or inside a function: an import
deferred into a function still means the two modules need each other, it only hides
the circle from Python. `from pkg import name` is an edge to `pkg.name` when that is a
module, else to `pkg`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "proxy"

# The units of the package (subpackages and top-level modules), bottom first: a unit
# imports only units above it in this list (below it in the stack). A new unit is placed
# here by whoever adds it.
LAYERS = (
    # foundations: no knowledge of vLLM, traffic or cutovers
    "proxy", "proxy.atomic", "proxy.credentials", "proxy.tasks", "proxy.eventloop",
    "proxy.histograms", "proxy.statefile", "proxy.terminal", "proxy.urls",
    "proxy.jsontext", "proxy.adminhttp", "proxy.boundedhttp", "proxy.exitcodes",
    # the stages a mirrored request's evidence passes, in order: its answers captured,
    # compared, judged by the gate's statistics, kept and read back as evidence
    "proxy.capture", "proxy.compare", "proxy.gate", "proxy.evidence",
    # pure cores: values in, values out (the cutover's I/O shell above its core)
    "proxy.launcher", "proxy.cutover", "proxy.cutover.shell", "proxy.tune",
    # the proxy's own metrics (the evidence metrics among them)
    "proxy.metrics",
    # the applications
    "proxy.mirror", "proxy.report", "proxy.fleet", "proxy.scan", "proxy.sim", "proxy.evaluate",
    "proxy.demo",
    # the edge
    "proxy.cli", "proxy.__main__",
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imported(name: str, path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = name.split(".")[:None if path.name == "__init__.py" else -1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield sub if sub in MODULES else target


def _graph() -> dict[str, set[str]]:
    return {name: {t for t in _imported(name, path) if t in MODULES and t != name}
            for name, path in MODULES.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _external(path: Path) -> set[str]:
    """Top-level names of the packages a file imports, at any level."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def _unit(module: str) -> str:
    """The LAYERS unit `module` belongs to: the longest one naming it or a package above it
    (a subpackage listed on its own, as the cutover's shell, is its own unit)."""
    parts = module.split(".")
    return next((".".join(parts[:n]) for n in range(len(parts), 1, -1)
                 if ".".join(parts[:n]) in LAYERS), ".".join(parts[:2]))


def test_the_circle_finder_finds_a_circle_through_three_modules() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_an_import_inside_a_function_and_a_relative_one_are_edges() -> None:
    edges = _graph()["proxy.cli"]  # `main` imports each subcommand lazily, by name
    assert all(_unit(e) == "proxy" or e in MODULES for e in edges)
    assert {n for n, targets in _graph().items() if "proxy.cli.eval_common" in targets} >= {
        "proxy.cli.eval_cmd", "proxy.cli.eval_measure"}


def test_no_import_circles_in_the_package() -> None:
    circles = _circles(_graph())
    assert not circles, "import circles (each a group of modules that import each other): " \
        + "; ".join(" <-> ".join(c) for c in circles)


def test_every_unit_has_a_place_in_the_layer_order() -> None:
    units = {_unit(m) for m in MODULES}
    assert units == set(LAYERS), (f"not in LAYERS: {sorted(units - set(LAYERS))}; "
                                  f"gone: {sorted(set(LAYERS) - units)}")


def test_no_unit_imports_one_above_it() -> None:
    rank = {unit: i for i, unit in enumerate(LAYERS)}
    upward = sorted(f"{m} -> {t}" for m, targets in _graph().items() for t in targets
                    if _unit(m) in rank and _unit(t) in rank and rank[_unit(t)] > rank[_unit(m)])
    assert not upward, "imports reaching up the layer order (tests/test_imports.py LAYERS): " \
        + "; ".join(upward)


def test_only_the_cutover_driver_touches_the_docker_sdk() -> None:
    """README: the Docker socket is touched only by the cutover's driver; `verify` and
    `eval memory` read containers through it."""
    users = sorted(name for name, path in MODULES.items() if "docker" in _external(path))
    assert users == ["proxy.cutover.shell.docker_driver"]


# What the cutover's pure core never imports: its I/O lives in proxy.cutover.shell.
IO_MODULES = {"aiohttp", "asyncio", "docker", "requests", "socket", "subprocess", "threading",
              "sqlite3", "shutil", "urllib.request", "urllib.error", "http"}


def test_the_cutover_core_does_no_io() -> None:
    """The state machine, its phases and values decide; the shell (driver, reconciler,
    service, admin, client, probes) acts. The core is tested by stepping it, not by I/O."""
    core = {name: path for name, path in MODULES.items()
            if _unit(name) == "proxy.cutover"}
    assert "proxy.cutover.machine" in core and "proxy.cutover.shell.reconciler" not in core
    found = []
    for name, path in sorted(core.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            imported = [alias.name for alias in node.names] if isinstance(node, ast.Import) \
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{name} -> {m}" for m in imported
                      if m in IO_MODULES or m.split(".")[0] in IO_MODULES - {"urllib"}]
    assert not found, "the cutover's core imports I/O modules: " + "; ".join(found)
