"""Train only E and U of a fixed backbone (or the whole model, --full) on Dyck-1 or k-hop induction heads.

Examples:
    python recipes/reprogram.py --task dyck --backbone sparse-ut --variant attention_only --out /work/runs/dyck-sparse
    python recipes/reprogram.py --task khop --backbone random-ut --variant residual_layernorm --full --out runs/x
    python recipes/reprogram.py --task khop --backbone hf:gpt2 --out runs/gpt2

Rerunning the same command resumes from the last checkpoint in --out; rerunning a finished run prints its row
again without training or appending it to --results a second time. The command is ut_peft.cli.reprogram
(`ut-peft reprogram` once installed; --config FILE, --report-to TRACKER and --debug as on every command).
"""

from ut_peft.cli.common import run
from ut_peft.cli.reprogram import main, parse

if __name__ == "__main__":
    run(main, parse)
