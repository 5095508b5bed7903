#!/usr/bin/env bash
# What follows the SmolLM2 random-words measurement once its design has stopped (issue 22); run-pooled-words.sh
# calls it when recipes/cram.py returns (the design done), and it can be rerun by hand: every step either redoes
# cheap deterministic work or skips output that is already complete (the nested simulation resumes from its JSONL).
#   1. the calibrated intervals (ut-peft calibrate: 400 simulated sweeps of the folder's own design at the line
#      fitted to its rows, a few minutes of one core): calibration.json; summary.json and report.md updated;
#   2. the done-when width: the published design's expected slope interval (and both designs' errors) at the same
#      fitted truth, 400 repeats (benchmarks/measurement_cost.py --truth-fitted);
#   3. the calibration's coverage at that truth: 100 simulated sweeps, each calibrated from 100 more
#      (benchmarks/simulated_intervals.py, two at a time on the 2 cores; about 1.5 hours of one core, a dry run on
#      the first 80 rows took 65 s per sweep at --inner 50 beside the cram job).
# Then commit the folder and results/benchmarks/*_rows<N>.* (N: the rows the design stopped at).
set -euo pipefail
cd "$(dirname "$0")/../.."
folder=results/smollm2-135m/pooled-words-v7
rows=$(grep -c . "$folder/rows.jsonl")
bench=results/benchmarks
nice -n 5 ut-peft calibrate "$folder" --workers 2
log=$bench/measurement_cost_v7_truthfitted_rows$rows.log
if [ ! -s "$log" ]; then
    nice -n 5 python benchmarks/measurement_cost.py --quick --designs pooled --pooled-version 7 --pooled-factor 2 \
        --workers 2 --truth-fitted "$folder" > "$log.partial"
    mv "$log.partial" "$log"
fi
name=$bench/simulated_intervals_smollm2_rows$rows
if [ ! -s "$name.log" ]; then
    nice -n 5 python benchmarks/simulated_intervals.py "$folder" --outer 100 --inner 100 --workers 2 \
        --results "$name.jsonl" --json "$name.json" > "$name.log.partial"
    mv "$name.log.partial" "$name.log"
fi
echo "finished: commit $folder and $bench/*_rows$rows.*"
