"""The architecture as tests: layers point one way, and no module cycle exists.

docs/architecture.md draws the layers; this file is what keeps them true. The
import graph is read from the source: every import, at module level, under
``TYPE_CHECKING`` or inside a function alike (a lazy import still ties two modules
together). The few lazy imports that cross a layer on purpose, the optional paths
such as ``strabo agent --embedded`` starting a server, are listed in LAZY.
"""

from __future__ import annotations

import ast
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


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports (and every ``from X import name`` as ``X.name``)."""
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
    return found


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


# Which top-level package may import which (besides itself and the standard library).
ALLOWED = {
    "langshaw": set(),
    "strabo.bundled": {"langshaw"},
    "strabo.core": {"langshaw", "strabo.bundled"},
    "peach": {"langshaw", "strabo.core"},
    "syncserver": {"langshaw", "strabo.core"},
    "strabo.proxy": {"langshaw", "strabo.core", "peach"},
    "strabo.ucpwire": set(),
    "strabo.ucp": {
        "langshaw", "strabo.core", "peach", "strabo.proxy", "strabo.bundled", "strabo.ucpwire"},
    "strabo.merchant": {"strabo.ucpwire"},
}


# Lazy imports that cross a layer on purpose: (importing module, imported package).
LAZY = {
    ("peach.llm._cli", "syncserver"),  # strabo agent --embedded runs a SyncServer
    ("peach.llm._cli", "strabo"),  # ... served by strabo.serving
    ("peach.llm._cli", "strabo.bundled"),  # --protocol purchase: a bundled protocol
}


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
            if owner != layer and owner not in ALLOWED[layer] and (module, owner) not in LAZY:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_an_agent_loads_no_web_server() -> None:
    code = (
        "import sys, peach, peach.local, peach.http, peach.llm, peach.peer\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded & {'starlette', 'uvicorn', 'syncserver'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert result.stdout.strip() == "[]"
