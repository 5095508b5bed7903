"""Accessibility sweep: how many sequences of each length can m memory vectors make a frozen LM emit?

    python recipes/cram.py              # small sweep on the bundled SmolLM2-135M (m = 1, 2, 4; n = 4..32)
    python recipes/cram.py --source words --ms 1 2 4 --lengths 8 16 24 32
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 recipes/cram.py ...   # 2 CPU processes
    accelerate launch recipes/cram.py --model org/name --protocol published --ms 1 2 3 4 5   # the paper's protocol
    python recipes/cram.py --model gemma-3-270m --protocol published --source words --ms 1 2    # bundled Gemma-3
    python recipes/cram.py --design sequential --target-ci 10 --num-sequences 8 --max-steps 3000 --patience 500
        # lengths from a logistic fit, batches of 8 fresh sequences, until each n_50 interval is < 10 tokens wide

Re-running into the same --output resumes; --overwrite starts afresh. --merge A B --output C pools sweeps that
differ only in --ms and --lengths (e.g. run on different machines) and reports on the union. Everything lives in
ut_peft.accessibility; the command is ut_peft.cli.cram (`ut-peft cram` once installed; --config FILE, --report-to
TRACKER and --debug as on every command), and this script runs it from a checkout.
"""

from ut_peft.cli.common import run
from ut_peft.cli.cram import main, parse

if __name__ == "__main__":
    run(main, parse)
