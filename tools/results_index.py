"""Write the README beside the runs of a results folder: one line per run folder, from what the folder and the
repository say about it (its settings.json, whether it finished or is paused, the scripts that run it, the commit
that first wrote it, the pages that quote it).

    python tools/results_index.py                      # rewrite results/<model>/README.md for every model folder
    python tools/results_index.py --check              # exit 1 if a README misses a run folder

Each README keeps its hand-written part (everything outside the ``runs`` markers); the table between them is this
script's. The table holds only what changes when a run is added, finished or paused, not its live row counts
(``ut-peft status FOLDER`` prints those), so committing rows as they land does not make it stale. ``--check`` (and
the test suite) asks only that every run folder has its line: the rest depends on the history a clone carries.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- BEGIN runs (written by tools/results_index.py) -->"
END = "<!-- END runs -->"
PAGES = ("README.md", "BENCHMARKS.md", "docs")


def run_folders(model_dir: Path) -> list[Path]:
    return sorted(p.parent for p in model_dir.glob("*/settings.json"))


def describe(settings: dict) -> str:
    """The settings that tell one run from another: protocol, source, design, m, step cap, precision."""
    source = settings.get("source")
    if isinstance(source, dict):
        source = source.get("name") or source.get("kind")
    design = settings.get("design") or {}
    kind = design.get("kind") or "grid"
    if design.get("version") is not None:
        kind += f" v{design['version']}"
    ms = settings.get("ms") or []
    cram = settings.get("cram") or {}
    autocast = cram.get("autocast", "auto")
    precision = "float32 on CPU" if autocast in ("auto", "none") else f"{autocast} autocast"
    protocol = settings.get("protocol") or "ut-peft"
    return (
        f"{protocol} protocol, {source}, {kind} design, m = {', '.join(map(str, ms))}, cap {cram.get('max_steps')}, "
        f"{precision}"
    )


def state(folder: Path) -> str:
    paused = folder / "PAUSED"
    if paused.exists():
        reason = paused.read_text(encoding="utf-8").strip().split(" (")[0]
        return reason if reason.lower().startswith("paused") else f"paused: {reason}"
    if (folder / "summary.json").exists():
        return "finished (summary.json)"
    return "unfinished (`ut-peft status` says where)"


def first_commit(path: Path) -> str:
    """The commit that added ``path`` (short hash and date), or "not committed"."""
    out = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%h %ad", "--date=short", "--", str(path.relative_to(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split("\n")
    lines = [line for line in out if line.strip()]
    return lines[-1] if lines else "not committed"


def scripts_for(folder: Path) -> list[str]:
    """The scripts beside the folder that name it (the commands that ran it)."""
    names = []
    for script in sorted(folder.parent.glob("*.sh")):
        if re.search(rf"\b{re.escape(folder.name)}\b", script.read_text(encoding="utf-8")):
            names.append(f"[{script.name}]({script.name})")
    return names


def pages_quoting(folder: Path) -> list[str]:
    """The pages (and their sections) that name the folder's path."""
    target = str(folder.relative_to(ROOT))
    pattern = re.compile(rf"{re.escape(target)}(?![\w-])")
    found = []
    for page in _pages():
        heading = None
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            elif pattern.search(line):
                entry = str(page.relative_to(ROOT)) + (f', "{heading}"' if heading else "")
                if entry not in found:
                    found.append(entry)
    return found


def _pages() -> list[Path]:
    pages = []
    for name in PAGES:
        path = ROOT / name
        pages += sorted(path.rglob("*.md")) if path.is_dir() else [path] if path.exists() else []
    return pages


def table(model_dir: Path) -> str:
    lines = [
        "| folder | what it measured | first written | state | run by | quoted in |",
        "|---|---|---|---|---|---|",
    ]
    for folder in run_folders(model_dir):
        settings = json.loads((folder / "settings.json").read_text(encoding="utf-8"))
        merged = settings.get("merged_from")
        what = describe(settings) + (f"; merged from {', '.join(map(str, merged))}" if merged else "")
        if (folder / "retargeted.json").exists():
            what += "; retargeted from an earlier folder (retargeted.json)"
        quoted = "; ".join(pages_quoting(folder)) or "-"
        scripts = ", ".join(scripts_for(folder)) or "recipes/cram.py (the pages quoting it give the command)"
        first = first_commit(folder / "settings.json")
        lines.append(
            f"| [{folder.name}]({folder.name}/) | {what} | {first} | {state(folder)} | {scripts} | {quoted} |"
        )
    return "\n".join(lines)


def render(model_dir: Path) -> str:
    readme = model_dir / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.exists() else f"# {model_dir.relative_to(ROOT)}\n\n"
    body = f"{BEGIN}\n{table(model_dir)}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + body + rest.split(END, 1)[1]
    return text.rstrip("\n") + "\n\n" + body + "\n"


def model_dirs() -> list[Path]:
    return sorted(d for d in (ROOT / "results").iterdir() if d.is_dir() and run_folders(d))


def missing(model_dir: Path) -> list[str]:
    """The run folders of ``model_dir`` its README does not list."""
    readme = model_dir / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    return [folder.name for folder in run_folders(model_dir) if f"[{folder.name}]({folder.name}/)" not in text]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that every run folder is listed")
    args = parser.parse_args(argv)
    if args.check:
        unlisted = {str(d.relative_to(ROOT)): missing(d) for d in model_dirs() if missing(d)}
        for where, names in unlisted.items():
            print(
                f"{where}/README.md does not list {', '.join(names)}: run python tools/results_index.py",
                file=sys.stderr,
            )
        return 1 if unlisted else 0
    for model_dir in model_dirs():
        readme = model_dir / "README.md"
        readme.write_text(render(model_dir), encoding="utf-8")
        print(f"wrote {readme.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
