"""The import layers of a package of ut_peft, as docs/architecture.md shows them: a module's floor is the length of
the longest chain of imports below it inside the package (floor 0 imports none of its modules). Imports are read as
tests/test_imports.py reads them (every ``import`` and ``from ... import`` in the file, inside functions and under
``if TYPE_CHECKING:`` too); the package's ``__init__`` files only re-export and are left out.

    python tools/import_layers.py                     # ut_peft.accessibility in this checkout
    python tools/import_layers.py --root /tmp/before  # another tree: git archive REV | tar -x -C /tmp/before
"""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str, modules: set[str]) -> set[str]:
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


def layers(root: Path, package: str) -> dict:
    """``{"floors": {floor: [module, ...]}, "lines": {module: n}, "arrows": n}`` for ``package`` under ``root``."""
    paths = {module_name(p, root): p for p in (root / "ut_peft").rglob("*.py")}
    inits = {module_name(p, root) for p in (root / "ut_peft").rglob("__init__.py")}
    inside = sorted(m for m in paths if m.startswith(package + ".") and m not in inits)
    graph = {m: {i for i in imports(paths[m], m, set(paths)) if i in inside} for m in inside}
    floor: dict[str, int] = {}

    def floor_of(module: str, seen: tuple = ()) -> int:
        if module not in floor:
            if module in seen:
                raise ValueError(f"an import cycle: {' -> '.join((*seen, module))}")
            floor[module] = 1 + max((floor_of(m, (*seen, module)) for m in graph[module]), default=-1)
        return floor[module]

    floors: dict[int, list[str]] = defaultdict(list)
    for module in inside:
        floors[floor_of(module)].append(module[len(package) + 1 :])
    lines = {m[len(package) + 1 :]: len(paths[m].read_text(encoding="utf-8").splitlines()) for m in inside}
    return {"floors": dict(sorted(floors.items())), "lines": lines, "arrows": sum(map(len, graph.values()))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the checkout")
    parser.add_argument("--package", default="ut_peft.accessibility")
    args = parser.parse_args(argv)
    found = layers(args.root, args.package)
    lines = found["lines"]
    long = ", ".join(f"{m} {n}" for m, n in sorted(lines.items()) if n > 800) or "none"
    print(
        f"{len(lines)} modules, {sum(lines.values()):,} lines, {found['arrows']} arrows, "
        f"{len(found['floors'])} floors; over 800 lines: {long}"
    )
    print("| floor | modules (lines) |\n|---|---|")
    for floor, modules in found["floors"].items():
        print(f"| {floor} | {', '.join(f'{m} ({lines[m]})' for m in sorted(modules))} |")


if __name__ == "__main__":
    main()
