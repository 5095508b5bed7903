#!/usr/bin/env bash
# The second full-precision accessibility measurement (issue 22, after random words): SmolLM2-135M, natural text,
# the published protocol (cap 3000, patience 500, lr 1e-2, nested texts), the pooled design over m = 1..5.
#
# Texts: the bundled corpus (pydoc_data.topics) cut into disjoint texts of whole paragraphs, 512+ tokens each
# (--text-chunks 512: 195 texts with SmolLM2's tokenizer), so that every row crams a text of its own; by document
# there would be 79 texts, too few for a design that draws a fresh one per row (docs/accessibility.md, "Enough texts
# for a fresh text per row"). The published code crams PG-19 chunks instead: the report names the difference.
#
# Rules: version 8 of the pooled design (version 6, the audited early abandon and the step counts while one steps law
# serves every m, with a floor of 64 fitted rows). Targets: twice the published design's RMSE (the words run's
# level), from the simulator at its default truth (nested texts, n_50 = 44.5 m + 5, Gemma-3-270m's published text
# slope; SmolLM2's text slope is unknown, its words slope is 20) with the step costs of SmolLM2's words rows:
#   python benchmarks/measurement_cost.py --quick --designs pooled --pooled-version 8 --pooled-factor 2 \
#       --cost-from results/smollm2-135m/pooled-words-v7
# (log results/benchmarks/measurement_cost_v8_quick_f2_smollm2costs.log: 91,178 row-steps on average, 22x fewer
# than the published design's, at slope RMSE 1.81x its, n_50 1.02-1.57x; at the assumed costs 61,108 at 1.66x).
# Its row-steps at m = 1, 3, 5 (32,603 / 27,272 / 31,303 in that log) priced at the words run's pace in token-steps
# per second (python benchmarks/run_pace.py results/smollm2-135m/pooled-words-v7 --tokens 50 141 232: 105 over its
# 26 hours, 267 in its fastest round; log results/benchmarks/run_pace_smollm2_words_rows69.log), for rows of m + n_50
# tokens: **about 35 hours of the 2 cores** (13 at the fastest pace): many sessions. The first rounds' own pace
# (the same script on this folder) replaces the estimate.
# Once the bracketing rounds have bracketed m = 1, 3 and 5, the targets are set again from this folder's own line and
# step costs (both fitted as the audit requires: pseudo-outcomes for the line, inverse-probability weights for the
# costs, so a row the abandon stopped is not read as a failure that ended at step 500):
#   python benchmarks/measurement_cost.py --quick --designs pooled --pooled-version 8 --pooled-factor 2 \
#       --truth-from results/smollm2-135m/pooled-text-v8 --cost-from results/smollm2-135m/pooled-text-v8
# then --retarget-from this folder into a new one with the targets it prints (the bracketing rows do not depend on the
# targets, so they are kept).
# Resumable: rerun this script and it continues from rows.jsonl and the in-flight snapshots (commit both as it goes).
cd "$(dirname "$0")/../.."
exec nice -n 5 python recipes/cram.py --model smollm2-135m --protocol published --source text --text-chunks 512 \
    --ms 1 2 3 4 5 --design pooled --num-sequences 8 --batch-size 12 --pooled-version 8 \
    --target-slope-se 3.48 --target-n50-se 1:4.14 2:7.68 3:11.26 4:14.32 5:17.75 \
    --output results/smollm2-135m/pooled-text-v8 "$@"
