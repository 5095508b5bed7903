"""The copy-length cliff: train on strings of lengths 5-50, test exact match up to 4x that.

    python recipes/copy_task.py --trainings full embeddings --steps 1500 --out runs/copy_task

``full`` trains a small GPT-2 entirely; ``embeddings`` trains only E, U and the learned positions of a frozen
random GPT-2 backbone (UT_REPROGRAM), or with ``--backbone <out>/full`` only fresh E, U on the frozen body and
positions of a trained copy model:

    python recipes/copy_task.py --trainings embeddings --backbone runs/copy_task/full --out runs/copy_reprogram

Writes copy_task.json (after every run, so finished runs are never lost; its settings name the trainings asked
for, so the file of a run that failed or was killed between them reads as partial and --combine refuses it),
copy_cliff.png, copy_task.md, and each trained model (or adapter) under <out>/<training>/.

The command is ut_peft.cli.copy_task (`ut-peft copy-task` once installed;
--config FILE and --debug as on every command).
"""

from ut_peft.cli.common import run
from ut_peft.cli.copy_task import main, parse

if __name__ == "__main__":
    run(main, parse)
