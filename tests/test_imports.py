"""The package's modules import one way: no module imports, even inside a function, one that imports it back.

So a walk from a recipe through the sweep to the output folder (recipes/cram.py -> accessibility.sweep ->
accessibility.store -> io) never comes back up. Package ``__init__`` files re-export their modules and are left out.
"""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ut_peft"
# The import graph is read the way tools/import_layers.py reads it (one definition for the test and the tool).
_spec = importlib.util.spec_from_file_location("import_layers", ROOT / "tools" / "import_layers.py")
import_layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(import_layers)


def module_name(path: Path) -> str:
    return import_layers.module_name(path, ROOT)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports (a name imported from a package counts as its module if it is one)."""
    return import_layers.imports(path, module_name(path), modules)


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


# The accessibility package's rooms, bottom up: a room imports only from the rooms below it (docs/architecture.md).
ROOMS = ("engine", "stats", "designs")


def room_of(module: str) -> int:
    """A module's room as its rank: engine 0, stats 1, designs 2, every other module of the package 3."""
    parts = module.split(".")
    return ROOMS.index(parts[2]) if len(parts) > 3 and parts[2] in ROOMS else len(ROOMS)


def test_the_accessibility_rooms_import_downward_only():
    root = PACKAGE / "accessibility"
    paths = {module_name(p): p for p in root.rglob("*.py")}
    packages = {module_name(p) for p in root.rglob("__init__.py")}
    assert room_of("ut_peft.accessibility.engine.cram") == 0 and room_of("ut_peft.accessibility.sweep") == 3
    upward = sorted(
        f"{name} -> {target}"
        for name, path in paths.items()
        if name not in packages
        for target in imports(path, set(paths)) - packages
        if room_of(target) > room_of(name)
    )
    assert not upward, f"imports from a room above (engine < stats < designs < the rest): {upward}"
