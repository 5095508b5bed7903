"""Print pip constraints that pin every dependency of pyproject.toml (and its test extra) at its declared floor.

`.ci/run` installs with them when UT_PEFT_CI_MIN_VERSIONS=1, so the suite also runs at the versions the
package says it supports. Names given as arguments are left free (torch: see .ci/run).
"""

import re
import sys
from pathlib import Path

import tomllib

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
free = {name.lower() for name in sys.argv[1:]}
for requirement in project["dependencies"] + project["optional-dependencies"]["test"]:
    match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)", requirement)
    if match is None:
        sys.exit(f"{requirement!r} has no plain '>=' floor; give it one so the minimum can be tested")
    if match.group(1).lower() not in free:
        print(f"{match.group(1)}=={match.group(2)}")
