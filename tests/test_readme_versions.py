"""The README's "Versions:" line states the floors pyproject.toml declares.

A newcomer who keeps a torch of their own (a CUDA build) reads the floors there before installing; a floor raised in
pyproject.toml and not in the README would send them into a resolver error or an old-version failure instead.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
FLOOR = re.compile(r"([A-Za-z][\w.-]*) >= ([\d.]+)")


def versions_line() -> str:
    """The README's sentence that starts with "Versions:", its line breaks read as spaces."""
    text = re.sub(r"\s+", " ", README)
    match = re.search(r"Versions: ([^()]*)", text)
    assert match, "the README has no 'Versions:' line"
    return match.group(1)


def declared_floors() -> dict[str, str]:
    """name (lower case) -> floor, for Python and every dependency pyproject.toml gives as ``name>=X``
    (read as text: tomllib is not in Python 3.10, which the package supports)."""
    floors = {"python": re.search(r'^requires-python = ">=([\d.]+)"', PYPROJECT, re.M).group(1)}
    dependencies = re.search(r"^dependencies = \[(.*?)^\]", PYPROJECT, re.M | re.S).group(1)
    for name, floor in re.findall(r'"([\w.-]+)>=([\d.]+)"', dependencies):
        floors[name.lower()] = floor
    return floors


def test_the_readme_floors_are_the_declared_ones():
    stated = {name.lower(): floor for name, floor in FLOOR.findall(versions_line())}
    declared = declared_floors()
    assert {"python", "torch", "transformers", "peft", "accelerate"} <= set(stated), stated
    wrong = {name: (floor, declared.get(name)) for name, floor in stated.items() if declared.get(name) != floor}
    assert not wrong, f"README floor differs from pyproject.toml's (README, pyproject): {wrong}"
