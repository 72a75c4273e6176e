"""The house rules of ``operator/kubeforge``, read from the source with :mod:`ast` (issue 30, item 4).

Nothing is imported: every module under ``operator/kubeforge`` is parsed, and its imports (at the
top, inside functions and under ``TYPE_CHECKING`` alike: a cycle a type checker or a lazy import
walks is still a cycle) become edges of one graph. The rules:

(a) no import cycle between modules;
(b) no private module or name (``_x``) imported from outside the package that owns it. A
    private top-level package ``kubeforge._x`` belongs to the public module ``kubeforge.x``,
    its only importer outside it (see :mod:`kubeforge._demo`);
(c) the pure core imports no I/O module (network, processes, threads, the Kubernetes clients);
(d) the deciding layers (admission, lifecycle, serving, autoscaling, placement) import no
    ``kubeforge.builders``: builders build objects from decisions, never the other way round;
(e) no module over :data:`MAX_MODULE_LINES` lines and no function over
    :data:`MAX_FUNCTION_LINES` (from its ``def`` line to its last line, docstring included).

And the benches and end-to-end helpers under ``e2e/`` import only public kubeforge names (the
rule (b) for them: they are the operator's users, issue 30 item 6).

A failure lists every offender, so one run says all there is to fix. Fix the code, not the rules.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import kubeforge

ROOT = Path(kubeforge.__file__).parent
REPO = ROOT.parent.parent
E2E = REPO / "e2e"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80

# The pure core: decisions and objects from (spec, observed state, now), no I/O.
PURE_PACKAGES = (
    "api", "objects", "accelerators", "placement", "admission", "lifecycle", "autoscaling", "builders", "serving",
    "progress", "selectors", "modelcache",
)
DECIDING_PACKAGES = ("admission", "lifecycle", "serving", "autoscaling", "placement", "modelcache")
# Modules that reach the network, other processes, threads or the API server.
IO_MODULES = (
    "aiohttp", "asyncio", "http.client", "http.server", "httpx", "kopf", "kubernetes", "kubernetes_asyncio",
    "multiprocessing", "concurrent", "requests", "selectors", "socket", "socketserver", "ssl", "subprocess",
    "threading", "urllib.request", "urllib3",
)


@dataclass(frozen=True)
class Import:
    """One imported module or name: ``target`` is the module imported (``a.b``) or the name's
    full path (``a.b.name``), ``line`` where it is."""

    importer: str
    target: str
    line: int


def _module_name(path: Path) -> str:
    parts = ("kubeforge",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, tuple[Path, ast.Module]]:
    """Every module under operator/kubeforge: its dotted name -> (path, parsed tree)."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        out[_module_name(path)] = (path, ast.parse(path.read_text(), str(path)))
    return out


def _is_package(module: str) -> bool:
    return _modules()[module][0].name == "__init__.py"


def _package_of(module: str) -> str:
    """The package a module belongs to: itself for a package, else its parent."""
    return module if _is_package(module) else module.rsplit(".", 1)[0]


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _package_of(importer).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@cache
def _imports() -> tuple[Import, ...]:
    """Every import in every module, ``from m import n`` as ``m.n`` (a submodule or a name)."""
    out = []
    for importer, (_, tree) in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out += [Import(importer, alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = _resolve(importer, node)
                out += [
                    Import(importer, module if alias.name == "*" else f"{module}.{alias.name}", node.lineno)
                    for alias in node.names
                ]
    return tuple(out)


def _module_of(target: str) -> str | None:
    """The kubeforge module an import target loads: the longest known module prefix."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in _modules():
            return name
    return None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in _modules()}
    for imp in _imports():
        target = _module_of(imp.target)
        if target is not None and target != imp.importer:
            graph[imp.importer].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # recursion is fine: the graph is a few hundred modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _cycle_path(graph: dict[str, set[str]], component: list[str]) -> str:
    """One concrete cycle through a component's first module, for the message."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in members)
        closing = [w for w in nxt if w == start]
        if closing and len(path) > 1:
            return " -> ".join(path + [start])
        fresh = [w for w in nxt if w not in seen]
        if not fresh:
            return " -> ".join(path + [nxt[0]])
        path.append(fresh[0])
        seen.add(fresh[0])


def _private_owner(target: str) -> str | None:
    """The package that owns the first private part of a dotted path, or None if it has none:
    ``kubeforge.admission._plan.x`` -> ``kubeforge.admission``; ``kubeforge._demo.steps`` ->
    ``kubeforge._demo`` (and its public twin ``kubeforge.demo`` may import it too)."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            if i == 1:  # a private top-level package or module: its own, as if a subpackage
                return ".".join(parts[:2])
            return ".".join(parts[:i])
    return None


def _may_import_private(importer: str, owner: str) -> bool:
    if importer == owner or importer.startswith(owner + "."):
        return True
    top, _, rest = owner.partition(".")
    return rest.startswith("_") and "." not in rest and importer == f"{top}.{rest[1:]}"


def _in_packages(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == f"kubeforge.{p}" or module.startswith(f"kubeforge.{p}.") for p in packages)


def _where(imp: Import) -> str:
    path = _modules()[imp.importer][0].relative_to(REPO)
    return f"{path}:{imp.line}: {imp.target}"


# --- the rules ----------------------------------------------------------------------------------


def test_the_rules_see_the_whole_package() -> None:
    """The walk finds the packages the rules name, and their imports (a guard on the guard)."""
    assert all(f"kubeforge.{p}" in _modules() for p in PURE_PACKAGES + DECIDING_PACKAGES)
    lifecycle = [i.target for i in _imports() if i.importer.startswith("kubeforge.lifecycle")]
    assert any(t.startswith("kubeforge.objects") for t in lifecycle)
    assert _private_owner("kubeforge.admission._plan.plan_admission") == "kubeforge.admission"
    assert _private_owner("kubeforge.objects.Pod") is None
    assert _may_import_private("kubeforge.demo", "kubeforge._demo")
    assert not _may_import_private("kubeforge.cli", "kubeforge._demo")


def test_no_import_cycles() -> None:
    """(a) The module graph is acyclic: every strongly connected component is one module."""
    graph = _graph()
    cycles = [_cycle_path(graph, c) + f"  (component: {', '.join(c)})" for c in _cycles(graph)]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_private_name_crosses_a_package() -> None:
    """(b) A ``_private`` module or name is imported only inside the package that owns it."""
    offenders = sorted(
        _where(imp) for imp in _imports()
        if imp.target.startswith("kubeforge")
        and (owner := _private_owner(imp.target)) is not None
        and not _may_import_private(imp.importer, owner)
    )
    assert not offenders, "private names imported across packages:\n" + "\n".join(offenders)


def test_pure_core_does_no_io() -> None:
    """(c) The pure core packages import no module that reaches the network, processes or threads."""
    offenders = sorted(
        _where(imp) for imp in _imports()
        if _in_packages(imp.importer, PURE_PACKAGES)
        and any(imp.target == m or imp.target.startswith(m + ".") for m in IO_MODULES)
    )
    assert not offenders, "I/O modules imported by the pure core:\n" + "\n".join(offenders)


def test_deciding_layers_do_not_import_builders() -> None:
    """(d) admission, lifecycle, serving, autoscaling and placement import nothing from builders."""
    offenders = sorted(
        _where(imp) for imp in _imports()
        if _in_packages(imp.importer, DECIDING_PACKAGES)
        and (imp.target == "kubeforge.builders" or imp.target.startswith("kubeforge.builders."))
    )
    assert not offenders, "deciding layers importing kubeforge.builders:\n" + "\n".join(offenders)


def test_modules_and_functions_are_short() -> None:
    """(e) No module over 400 lines, no function (or method) over 80."""
    offenders = []
    for path, tree in _modules().values():
        where = path.relative_to(REPO)
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            offenders.append(f"{where}: module of {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    offenders.append(f"{where}:{node.lineno}: {node.name} of {length} lines")
    assert not offenders, f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function:\n" + "\n".join(
        sorted(offenders)
    )


def test_e2e_imports_only_public_kubeforge_names() -> None:
    """The benches, the chaos and peers helpers import no private kubeforge module or name."""
    offenders = []
    for path in sorted(E2E.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            offenders += [f"{path.relative_to(REPO)}:{node.lineno}: {t}" for t in targets
                          if t.split(".")[0] == "kubeforge" and _private_owner(t) is not None]
    assert not offenders, "private kubeforge names imported by e2e/:\n" + "\n".join(offenders)
