"""Decoder-cell shares and refined slope bounds of a causal LM, next to its measured n_50 slope.

    python recipes/geometry.py --model smollm2-135m --samples 1000000 \
        --summary runs/accessibility/smollm2/summary.json --out runs/geometry/smollm2

Writes geometry.json (everything), cells.png (share vs rank; per-token decay), geometry.md (a README section)
and state.pt (support and counts: ``--from-state state.pt --summary ...`` recomputes the bounds without sampling).

The command is ut_peft.cli.geometry (`ut-peft geometry` once installed;
--config FILE and --debug as on every command).
"""

from ut_peft.cli.common import run
from ut_peft.cli.geometry import main, parse

if __name__ == "__main__":
    run(main, parse)
