"""Replace the text between <!-- BEGIN name --> and <!-- END name --> in a Markdown file.

Usage: python tools/set_section.py README.md accessibility < section.md
Several people edit README.md and BENCHMARKS.md at once; each owns one marked section.
"""

import re
import sys

from ut_peft.io import atomic_write_text


def main(path: str, name: str) -> None:
    body = sys.stdin.read().strip("\n")
    text = open(path, encoding="utf-8").read()
    pattern = re.compile(rf"(<!-- BEGIN {re.escape(name)} -->\n).*?(<!-- END {re.escape(name)} -->)", re.S)
    if not pattern.search(text):
        sys.exit(f"{path} has no section markers for {name!r}")
    text = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    atomic_write_text(path, text)


if __name__ == "__main__":
    main(*sys.argv[1:3])
