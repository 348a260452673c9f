"""The architecture as tests: layers point one way, and no module cycle exists.

docs/architecture.md draws the layers; this file is what keeps them true. The
import graph is read from the source: every import, at module level, under
``TYPE_CHECKING`` or inside a function alike (a lazy import still ties two modules
together). The few lazy imports that cross a layer on purpose, the optional paths
such as ``strabo agent --embedded`` starting a server, are listed in LAZY.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["langshaw", "peach", "syncserver", "proxy", "strabo"]
# Folders installed under another name (pyproject's package-dir).
INSTALLED_AS = {"proxy": "strabo.proxy"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    parts[0] = INSTALLED_AS.get(parts[0], parts[0])
    return ".".join(parts)


@functools.cache
def imports(path: Path) -> frozenset[str]:
    """Every module ``path`` imports (and every ``from X import name`` as ``X.name``);
    read once per run (a dozen tests walk the whole tree)."""
    tree = ast.parse(path.read_text())
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            found.add(stem)
            found.update(f"{stem}.{alias.name}" for alias in node.names)
    return frozenset(found)


def graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    modules = {module_name(p): p for p in files}
    return {
        name: {m for m in imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def test_no_module_imports_itself_through_others() -> None:
    edges = graph()
    # Importing a package runs its __init__, which imports its own modules: an
    # edge to one's own package is not a cycle of concern, a cycle of modules is.
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in edges[node]:
            if node.startswith(target + ".") or target.startswith(node + "."):
                continue  # a package and its own modules
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target):], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert cycles == []


# Which top-level package may import which (besides itself and the standard
# library): from the bottom, the language, the engine that keeps social state
# (with its HTTP server), the agents, the bridges, the applications.
ALLOWED = {
    "langshaw": set(),
    "syncserver": {"langshaw"},
    "peach": {"langshaw", "syncserver"},
    "strabo.proxy": {"langshaw", "syncserver", "peach"},
    "strabo.ucpwire": set(),
    "strabo.ucp": {"langshaw", "syncserver", "peach", "strabo.proxy", "strabo.ucpwire"},
    "strabo.merchant": {"strabo.ucpwire"},
    # Deprecated aliases of the old paths, kept one release.
    "strabo.core": {"syncserver"},
    "strabo.bundled": {"syncserver"},
}

# The SyncServer's HTTP side: the agents use the engine, never the server.
SERVER = {
    "syncserver.app", "syncserver._attempts", "syncserver._channel", "syncserver.cli",
    "syncserver._guard", "syncserver._presence", "syncserver._stream", "syncserver.wire",
    "syncserver._dashboard", "syncserver._figures", "syncserver._rawstream", "syncserver._fastlane",
    "syncserver.create_app", "syncserver.uvicorn_options",
}


# Lazy imports that cross a layer on purpose: (importing module, imported package).
LAZY = {
    ("peach.llm.cli", "syncserver.create_app"),  # strabo agent --embedded runs a SyncServer
    ("peach.llm.cli", "syncserver.uvicorn_options"),  # ... with its uvicorn options
}


def test_agents_never_import_the_servers_http_side() -> None:
    files = [p for pkg in ("peach", "proxy") for p in (ROOT / pkg).rglob("*.py")]
    wrong = [
        f"{module_name(path)} imports {target}"
        for path in files
        for target in imports(path)
        if any(target == s or target.startswith(s + ".") for s in SERVER)
        and (module_name(path), target) not in LAZY
    ]
    assert wrong == []


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_point_one_way(layer: str) -> None:
    wrong = []
    for module, targets in graph().items():
        if module != layer and not module.startswith(layer + "."):
            continue
        for target in targets:
            owner = next(
                (name for name in sorted(ALLOWED, key=len, reverse=True)
                 if target == name or target.startswith(name + ".")),
                target.split(".")[0],
            )
            if owner != layer and owner not in ALLOWED[layer]:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_an_agent_loads_no_web_server() -> None:
    code = (
        "import sys, peach, peach.local, peach.http, peach.llm, peach.peer\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded & {'starlette', 'uvicorn'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert result.stdout.strip() == "[]"


def owner(module: str) -> str:
    """The package a module belongs to, as ALLOWED names them."""
    return next(
        (name for name in sorted(ALLOWED, key=len, reverse=True)
         if module == name or module.startswith(name + ".")),
        module.split(".")[0],
    )


def test_no_package_imports_another_packages_private_module() -> None:
    # A module whose name starts with "_" is its package's own business: the
    # others go through what the package exports. Tests may still reach in.
    files = [
        p
        for top in (*PACKAGES, "bench", "samples", "scripts")
        for p in (ROOT / top).rglob("*.py")
    ]
    wrong = []
    for path in files:
        module = module_name(path)
        for target in imports(path):
            parts = target.split(".")
            private = next(
                (i for i, part in enumerate(parts) if part.startswith("_")
                 and not part.startswith("__")),
                None,
            )
            if private is None:
                continue
            if owner(".".join(parts[:private])) != owner(module):
                wrong.append(f"{module} imports {target}")
    assert wrong == []


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [("strabo.core", "syncserver", "SyncServer"), ("strabo.bundled", "syncserver.bundled", "find")],
)
def test_the_old_import_paths_still_work_one_release_and_warn(
    old: str, new: str, name: str
) -> None:
    code = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({new!r})\n"
        f"print(getattr(old, {name!r}) is getattr(new, {name!r}),"
        " [str(w.message) for w in caught if w.category is DeprecationWarning])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert result.stdout.startswith("True ['" + old + " is deprecated"), result.stdout


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for top in PACKAGES
        for p in (ROOT / top).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}


def test_the_servers_error_bodies_are_made_in_one_place() -> None:
    # syncserver.errors.error_json: every answer, channel frame, stream event and
    # guard response; no other module of the server spells the shape out.
    spelled = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "syncserver").rglob("*.py")
        if p.name != "errors.py" and '"error": {' in p.read_text()
    ]
    assert spelled == []
