"""The package's modules import one way: no module imports, even inside a function, one that imports it back.

So a walk from a recipe through the sweep to the output folder (recipes/cram.py -> accessibility.sweep ->
accessibility.store -> io) never comes back up. Package ``__init__`` files re-export their modules and are left out.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ut_peft"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports (a name imported from a package counts as its module if it is one)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def test_the_package_imports_one_way():
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    packages = {module_name(p) for p in PACKAGE.rglob("__init__.py")}
    graph = {name: imports(path, set(paths)) - packages for name, path in paths.items() if name not in packages}
    assert "ut_peft.accessibility.store" in graph["ut_peft.accessibility.sweep"]  # the walk sees imports
    cycles, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(path[path.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, f"modules that import back up: {cycles}"
