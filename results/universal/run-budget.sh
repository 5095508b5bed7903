#!/usr/bin/env bash
# The fixed universal transformers at the references' data budget (issue 42): sparse UT, random UT and the fully
# trained model (residual + LayerNorm, width 160, 4 layers, one head of 16) on k = 2 alone, k = 3 alone and k = 1..4
# mixed, each to 10^7 fresh examples at batch 256, stopping early at 99% held out or at a doubling of examples that
# moved the held-out accuracy by less than a point; seed 0 of the 9 rows, then seeds 1 and 2 of every row whose seed 0
# reached the paper's level or ended within 10 points of it (ut_peft.tasks.plan.budget_runs). Expected cost, how to
# read the results: docs/universal.md, "k-hop at the references' data budget".
#
# One heavy job at a time on the 2 cores: this script first waits (polling every 10 minutes) until the accessibility
# campaign's Gemma-3-270M words run (results/gemma-3-270m/pooled-words-glove-v3, where it goes on after its retargets
# from pooled-words-glove and -v2) has finished (its summary.json) or is paused (a PAUSED file in its folder) and its
# process has let go of the folder's sweep.lock. Then WORKERS (default 2)
# workers at one torch thread each share the runs (each run is locked by the worker training it), at nice 10.
#
# Frozen code: the workers execute commit FROZEN from a worktree of its own (UT_PEFT_FROZEN_TREE, default ../ut-run
# beside the checkout), so that no later edit of the checkout changes a run's schedule or stopping rules between its
# checkpoints; they write their checkpoints, rows, tables and figure into this checkout (--base-dir).
#
# Start it (resumable: rerun after a kill, a reboot or a pause; finished runs are skipped, a run in flight continues
# from its last checkpoint in runs/universal/<name>, rows land in results/universal/runs.jsonl). Checkpoints are
# machine-local, so the script carries them through the repository (tools/carry_checkpoints.py): it restores the
# copies in results/universal/inflight/ before the workers start (on a new machine a run goes on where the last one
# left it), copies each run's checkpoint there every CARRY_MINUTES (default 60) while they run and once more when they
# end, and tools/commit_rows.sh results/universal commits the copies with the rows:
#   . .venv/bin/activate && nohup bash results/universal/run-budget.sh > /work/logs/ut-budget.log 2>&1 &
# Give the cores back (e.g. to resume the Gemma run): write why into results/universal/PAUSED; each worker stops its run
# at the run's next checkpoint (500 steps, a minute or two) and exits. Remove the file and rerun this script to go on.
# The table and figure (docs/universal.md, results/universal/budget.md) are rebuilt as each worker ends, or by hand:
#   python recipes/ut_experiments.py --report-only
set -euo pipefail
FROZEN=4f581fe
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
tree=${UT_PEFT_FROZEN_TREE:-$(dirname "$repo")/ut-run}
if [ ! -d "$tree" ]; then
    git worktree add --detach "$tree" "$FROZEN"
fi
if [ "$(git -C "$tree" rev-parse --short=7 HEAD)" != "$FROZEN" ]; then
    echo "$tree is not at commit $FROZEN: remove it (git worktree remove $tree) and rerun" >&2
    exit 2
fi
wait_for=${UT_PEFT_WAIT_FOR:-results/gemma-3-270m/pooled-words-glove-v3}
paused=results/universal/PAUSED
workers=${WORKERS:-2}

if [ -e "$paused" ]; then
    echo "$paused exists ($(head -c 300 "$paused")): the budget runs are paused; remove it and rerun to go on" >&2
    exit 0
fi
lock_free() {  # nobody holds the campaign's sweep lock or its finish lock (flock -n fails while a holder runs)
    { [ ! -e "$wait_for/sweep.lock" ] || flock -n "$wait_for/sweep.lock" true; } &&
        { [ ! -e "$wait_for/finish.lock" ] || flock -n "$wait_for/finish.lock" true; }
}
until { [ -e "$wait_for/summary.json" ] || [ -e "$wait_for/PAUSED" ]; } && lock_free; do
    echo "$(date '+%F %T') waiting for $wait_for to finish (summary.json) or pause (PAUSED, its process gone)"
    sleep "${UT_PEFT_POLL_SECONDS:-600}"
done
python tools/carry_checkpoints.py restore results/universal/inflight runs/universal \
    --results results/universal/runs.jsonl
echo "$(date '+%F %T') starting $workers budget workers"
carry() {
    python tools/carry_checkpoints.py save runs/universal results/universal/inflight \
        --results results/universal/runs.jsonl "$@" || true
}
( while sleep $((${CARRY_MINUTES:-60} * 60)); do carry; done ) &
carrier=$!

pids=()
for _ in $(seq "$workers"); do
    # PYTHONPATH puts the frozen tree's ut_peft ahead of any installed (editable) copy.
    PYTHONPATH="$tree" nice -n 10 python "$tree/recipes/ut_experiments.py" --budget --threads 1 \
        --stop-file "$repo/$paused" --base-dir "$repo" &
    pids+=("$!")
    sleep 30  # the next worker then finds the first one's run locked and takes the next
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=$?
done
kill "$carrier" 2>/dev/null || true
wait "$carrier" 2>/dev/null || true  # a copy in progress ends before the last one starts
carry --every 0  # where each run stopped (paused or finished), for the next machine
echo "$(date '+%F %T') budget workers done (exit $status)"
exit "$status"
