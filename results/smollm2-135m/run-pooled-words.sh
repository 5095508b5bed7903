#!/usr/bin/env bash
# The first full-precision accessibility measurement on these CPUs (issue 22): SmolLM2-135M, random words, the
# published protocol (cap 3000, patience 500, lr 1e-2, fresh words per row), the pooled design over m = 1..5.
#
# Since session 13 it runs in pooled-words-v2: version 2 of the pooled rules (a floor of 128 fitted rows), retargeted
# (--retarget-from, every row and snapshot kept) from pooled-words once its bracketing rounds had bracketed m = 1, 3
# and 5 (28 rows; pooled-words stays as it was, v1 rules, its first targets). The targets are the issue's acceptance
# level, twice the published design's RMSE at this model, from the simulator set to the folder's rows:
#   python benchmarks/measurement_cost.py --quick --repeats 50 --pooled-version 2 --designs pooled --words --cap-fails \
#       --truth-from results/smollm2-135m/pooled-words --cost-from results/smollm2-135m/pooled-words --pooled-factor 2
# (--repeats 50 --pooled-version 2: what --quick meant before session 16)
# (truth n_50 = 16.11 m + 9.17, relative width 0.130, rows failing at the cap as real ones do; log
# results/benchmarks/measurement_cost_v2_quick_words_capfails_f2_retarget.log: the published design's slope RMSE 0.66,
# n_50 RMSE 1.44 / 1.83 / 1.83 / 1.91 / 2.58; the pooled design at these targets 1.16x / 0.65-1.00x of it, because
# the floor of 128 rows binds, at about 265,000 row-steps, 5.3x fewer than the published design's).
# Resumable: rerun this script and it continues from rows.jsonl and the in-flight snapshots (commit both as it goes).
# Next (docs/accessibility.md, "Progress"): test the step-count law across m as rows land
# (python benchmarks/steps_information.py results/smollm2-135m/pooled-words-v2), and retarget again once the fitted
# rounds have pinned the width (the same command with --truth-from results/smollm2-135m/pooled-words-v2).
# Session 15: version 3 of the rules (the step counts too) was simulated at this model's line and buys nothing per
# unit of error on random words, so the run stays on version 2 (BENCHMARKS.md, "Session 15").
# Session 16: version 4 (the audited early abandon) was measured at this setting (400 repeats: 160,946 row-steps at
# slope 1.52x the published design's, version 2 267,685 at 1.30x) and declined for this run: it replays only the 28
# bracketing rows of this folder, so a retarget would drop 24 rows (46,428 row-steps) for about a tenth less to spend
# at equal error (docs/accessibility.md, "Session 16").
# Session 18: version 7 of the rules (version 2 with a floor of 64 fitted rows instead of 128) in pooled-words-v7,
# retargeted from pooled-words-v2 at 60 rows (32 fitted: every row and the 8 snapshots of the round in flight kept;
# pooled-words-v2 stays as it was). At these targets version 2's floor, not the targets, decides the stop: simulated
# at this model (400 repeats), a floor of 64 stops at slope RMSE 1.77x the published design's (the issue asks for 2x at
# most) for 167,531 row-steps where 128 gives 1.30x for 267,685 (the 28-row line the targets came from), and at 0.75x
# for 153,659 where 128 gives 0.48x for 267,687 (the sharper line and per-m widths of the first 56 rows):
#   python benchmarks/measurement_cost.py --quick --pooled-version 2 --designs pooled --words --cap-fails \
#       --truth-from results/smollm2-135m/pooled-words --cost-from results/smollm2-135m/pooled-words \
#       --pooled-factor 2 --pooled-min-rows 64        (or 128; logs ..._v2_words_smollm2_f2_400_min*.log)
#   python benchmarks/measurement_cost.py --quick --pooled-version 2 --designs pooled --words --cap-fails \
#       --slope 19.46 --intercept 1.05 --rel-width 0.204 --width-power -1.14 \
#       --cost-from results/smollm2-135m/pooled-words-v2 --cost-rows 56 --pooled-factor 2 --pooled-min-rows 64
# (BENCHMARKS.md, "Session 18"). The targets are unchanged.
# Session 19: when the design stops, its intervals are calibrated by simulating this folder's own design at the line
# fitted to its rows (the Wald intervals of version 7 cover about 81% here; benchmarks/simulated_intervals.py
# measures the calibrated ones): ut-peft calibrate results/smollm2-135m/pooled-words-v7 (400 simulated sweeps, a few
# minutes of one core; it updates summary.json and report.md), then commit calibration.json with the rest.
cd "$(dirname "$0")/../.."
old=results/smollm2-135m/pooled-words-v2
new=results/smollm2-135m/pooled-words-v7
# The first start retargets (a retarget killed before its settings.json is redone); every later one resumes.
[ -f "$new/settings.json" ] && retarget=() || retarget=(--retarget-from "$old")
# cram.py returns once the design has stopped (a killed run returns nothing, so the next start resumes); then the
# calibration and the checks that need the final rows (finish-pooled-words.sh, each step skipped once done).
# words:wordfreq: the list this run drew from (a bare words means the paper's GloVe list under the published
# protocol since issue 41).
nice -n 5 python recipes/cram.py --model smollm2-135m --protocol published --source words:wordfreq \
    --ms 1 2 3 4 5 --design pooled --num-sequences 8 --batch-size 12 --pooled-version 7 \
    --target-slope-se 1.32 --target-n50-se 1:2.88 2:3.66 3:3.66 4:3.83 5:5.17 \
    "${retarget[@]}" --output "$new" "$@" || exit $?
exec bash results/smollm2-135m/finish-pooled-words.sh
