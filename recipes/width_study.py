"""Reproduce the width claims: the smallest exact width per (L, d), the multi-head width, the fitted error vs m.

python recipes/width_study.py --layers 1,2,3 --dims 2,4,8 --json /work/runs/width_study.json

The command is ut_peft.cli.width_study (`ut-peft width-study` once installed;
--config FILE and --debug as on every command).
"""

from ut_peft.cli.common import run
from ut_peft.cli.width_study import main, parse

if __name__ == "__main__":
    run(main, parse)
