#!/usr/bin/env bash
# What follows the Gemma-3-270M words measurement once its design has stopped (issue 41); run-pooled-words-glove.sh
# calls it when recipes/cram.py returns with the design done (summary.json written), and it can be rerun by hand:
# every step redoes cheap deterministic work or skips output that is already complete (the nested simulations resume
# from their JSONL files). It runs the checkout's analysis code, not the run's frozen tree: none of it changes a row.
#   1. the calibrated intervals (ut-peft calibrate: 400 simulated sweeps of the folder's own design at the line fitted
#      to its rows): calibration.json; summary.json and report.md updated;
#   2. the calibration's coverage at the three truths the report's rule asks for (the fitted line, the common-width
#      law, the slope moved by its interval's half-width): 100 simulated sweeps at each, each calibrated from 100 more
#      (benchmarks/simulated_intervals.py --all-truths, two at a time on the 2 cores).
#   3. the run's own cost figure: the published design and this folder's own pooled design (the targets, rules and
#      batch its settings.json ran with, --pooled-targets-from) simulated at the same fitted truth, 400 repeats
#      (benchmarks/measurement_cost.py --truth-fitted): its last line is published row-steps / this design's row-steps
#      at their RMSE ratios, and the published design's expected slope interval is the width the issue's "at most 6
#      tokens wide" is set beside;
#   4. each slope estimator's error on this design's rows (benchmarks/estimators_on_design.py, 400 sweeps of the
#      folder's design at its fitted line): the bias and RMSE of the paper's estimator and of the per-m MLE line on
#      such rows, beside the pooled slope's, and where the folder's own differences between them fall; the README
#      row sets the paper's estimator on the same rows beside the pooled slope and needs its error to read it;
#   5. the first-token stalls sample (issue 41, item 5): the three shortest stalls of each m crammed again from a
#      second init, in the published layout and with the BOS before the memory (benchmarks/first_token_stalls.py
#      --per-m 3; at most about 29,000 row-steps, some 8 hours; resumable from its output and kept states, all in
#      results/benchmarks/first_token_stalls_gemma_words_glove/). It runs last, after the line that says the figures
#      are done, so the endgame's commits need not wait for it.
# Then commit the folder and results/benchmarks/*gemma_words_glove*_rows<N>.* (N: the rows the design stopped at), and
# add the three truths' figures to ut_peft/accessibility/stats/coverage.py's CALIBRATED_TABLE under the rows' digest
# (store.rows_digest; the table's test checks each figure against its record): until then the report prints the
# calibrated intervals with "coverage not measured at this folder's line".
# The folder is the first argument (default: pooled-words-glove-v3, the folder the run continues in since its second
# retarget).
# The caller holds FOLDER/finish.lock, not the folder's sweep.lock: ut-peft calibrate takes sweep.lock itself and
# refuses a folder whose lock another process holds.
set -euo pipefail
cd "$(dirname "$0")/../.."
folder=${1:-results/gemma-3-270m/pooled-words-glove-v3}
if [ ! -e "$folder/summary.json" ]; then
    echo "$folder has no summary.json: its design has not stopped (ut-peft status $folder says where it stands)" >&2
    exit 2
fi
# A summary.json alone does not say the design stopped: `recipes/cram.py --report-only` (which `ut-peft status`
# suggests) writes one for a design still running, and the records below would then be named as the final figures
# (_rows<N>) of rows the design has not finished.
stage=$(python - "$folder/summary.json" <<'EOF'
import json, sys
print(((json.load(open(sys.argv[1])).get("pooled") or {}).get("stop") or {}).get("stage"))
EOF
)
if [ "$stage" != stopped ]; then
    echo "$folder/summary.json says its design has not stopped (stage: $stage; a --report-only summary of a design" \
        "still running): rerun this once the run has stopped (ut-peft status $folder says where it stands)" >&2
    exit 2
fi
rows=$(grep -c . "$folder/rows.jsonl")
bench=results/benchmarks
nice -n 5 ut-peft calibrate "$folder" --workers 2
# The coverage first: the report's trust in the calibrated intervals rests on it (CALIBRATED_TABLE).
name=$bench/simulated_intervals_gemma_words_glove_rows$rows
if [ ! -s "$name.log" ]; then
    nice -n 5 python benchmarks/simulated_intervals.py "$folder" --all-truths --outer 100 --inner 100 --workers 2 \
        --results "$name" --json "$name.json" > "$name.log.partial"
    mv "$name.log.partial" "$name.log"
fi
log=$bench/measurement_cost_gemma_words_glove_owntargets_rows$rows.log
if [ ! -s "$log" ]; then
    nice -n 5 python benchmarks/measurement_cost.py --quick --designs pooled --workers 2 --truth-fitted "$folder" \
        --pooled-targets-from "$folder" > "$log.partial"
    mv "$log.partial" "$log"
fi
name=$bench/estimators_on_design_gemma_words_glove_rows$rows
if [ ! -s "$name.log" ]; then
    rm -f "$name.json"  # a record without its log is from an interrupted step (the benchmark never replaces one)
    nice -n 5 python benchmarks/estimators_on_design.py "$folder" --repeats 400 --workers 2 --output "$name.json" \
        > "$name.log.partial"
    mv "$name.log.partial" "$name.log"
fi
echo "finished: commit $folder and $bench/*gemma_words_glove*_rows$rows.*; then add the three truths to CALIBRATED_TABLE"
# One folder for the records, their kept states and the table, so that `tools/commit_rows.sh $stalls 20` keeps all
# of it committed while it runs (a session ends; the next may be on another machine).
stalls=$bench/first_token_stalls_gemma_words_glove
mkdir -p "$stalls"
if [ ! -s "$stalls/report.log" ]; then
    nice -n 5 python benchmarks/first_token_stalls.py "$folder" --ms 1 3 5 --kinds stall --per-m 3 --attempts 2 \
        --layouts given-first --output "$stalls/stalls.jsonl" > "$stalls/report.log.partial"
    mv "$stalls/report.log.partial" "$stalls/report.log"
fi
echo "stalls sample done: commit $stalls (docs/accessibility.md, \"First-token stalls\")"
