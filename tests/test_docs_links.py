"""Every local link and every ``results/`` path that README.md, BENCHMARKS.md and docs/ quote still resolves.

A figure in the docs points at the rows that produced it; when files or sections move, this catches the dangling
link before a reader does.
"""

import fnmatch
import functools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)|<img [^>]*src=\"([^\"]+)\"")
# A results/ path as the pages write it, with shell braces (`m{1,2}`); a `<name>` or `{f}` placeholder ends it.
RESULTS_PATH = re.compile(r"(?<![\w/.-])results/(?:[\w./*-]|\{[\w.-]+(?:,[\w.-]+)+\})+")


def expand_braces(path: str) -> list[str]:
    """``a-m{1,2}`` -> ``a-m1``, ``a-m2``, as the shell reads it."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    head, tail = path[: match.start()], path[match.end() :]
    return [e for alt in match.group(1).split(",") for e in expand_braces(head + alt + tail)]


@functools.cache
def committed_files() -> frozenset[str] | None:
    """The files git tracks in this checkout, or None outside one: a quoted path must be in git, not only on this
    disk (an emptied folder, or rows never committed, exist here and not in a clean clone)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    listing = subprocess.run(["git", "ls-files", "-z", "results"], cwd=ROOT, capture_output=True, check=False)
    if listing.returncode != 0:
        return None
    return frozenset(listing.stdout.decode().split("\0")) - {""}


def is_committed(path: str, tracked: frozenset[str] | None) -> bool:
    """A file, a folder holding a file, or a glob matching a file, that a clean clone holds."""
    path = path.rstrip("/")
    if tracked is None:
        return bool(list(ROOT.glob(path)))
    return any(
        fnmatch.fnmatchcase(file, path) or file.startswith(path + "/") or fnmatch.fnmatchcase(file, path + "/*")
        for file in tracked
    )


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {github_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def local_links(page: Path):
    text = page.read_text(encoding="utf-8")
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if not re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            yield target


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in local_links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file {file})")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target} (no heading with anchor #{fragment} in {file.name})")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_local_links_resolve(page):
    broken = broken_links(page)
    assert not broken, f"{page.name} links to what is not there: {broken}"


def test_a_moved_file_or_heading_is_caught(tmp_path):
    (tmp_path / "other.md").write_text("# Kept heading\n")
    page = tmp_path / "page.md"
    page.write_text("[a](other.md#kept-heading) [b](gone.md) [c](other.md#moved) [d](https://example.org/x)\n")
    assert [b.split(" ")[0] for b in broken_links(page)] == ["gone.md", "other.md#moved"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_quoted_results_paths_exist(page):
    missing = sorted(
        {
            path
            for quoted in RESULTS_PATH.findall(page.read_text(encoding="utf-8"))
            for path in expand_braces(quoted.rstrip("./-"))
            if not is_committed(path, committed_files())
        }
    )
    assert not missing, f"{page.name} quotes results/ paths that are not committed: {missing}"


def test_a_path_only_on_this_disk_is_not_committed():
    tracked = frozenset({"results/a/rows.jsonl", "results/a/sub/x.json"})
    assert is_committed("results/a", tracked) and is_committed("results/a/", tracked)
    assert is_committed("results/a/*.jsonl", tracked) and is_committed("results/a/sub", tracked)
    assert not is_committed("results/a/inflight", tracked)  # an emptied folder: on disk, not in a clone
    assert not is_committed("results/ab", tracked)


def test_the_rules_read_paths_as_github_and_the_shell_do():
    assert expand_braces("results/x-m{1,2}") == ["results/x-m1", "results/x-m2"]
    assert github_anchor("Next to the paper: Gemma-3 (2 CPU cores)") == "next-to-the-paper-gemma-3-2-cpu-cores"
    assert github_anchor("UT_REPROGRAM against stock peft's E/U") == "ut_reprogram-against-stock-pefts-eu"
