#!/usr/bin/env bash
# Dyck-1 at the plan's lengths (8 pairs / 16 brackets), fresh strings, seed 0 of the sparse UT, the random UT and the
# fully trained model, run again with the held-out accuracy per string length that rows keep since 2026-12-05
# (per_length): the held-out set holds every string of 1-4 brackets, which training therefore never draws
# (benchmarks/dyck_held_out_lengths.py), and the rows dyck-*-fresh-s0 in runs.jsonl give only the mix. The same
# commands as the plan's rows (python recipes/ut_experiments.py --list), into a results file of their own; resumable
# (rerun it: a finished run is not trained again). Read them with
#   python benchmarks/dyck_held_out_lengths.py --rows results/universal/dyck-lengths.jsonl
set -euo pipefail
cd "$(dirname "$0")/../.."
common=(--variant residual_layernorm --width 128 --layers 4 --heads 4 --head-dim 32 --steps 2000 --warmup-steps 200
    --eval-every 250 --results results/universal/dyck-lengths.jsonl)
export OMP_NUM_THREADS=1  # one core, beside the budget runs
for kind in sparse random full; do
    case $kind in
        sparse) extra=(--backbone sparse-ut) ;;
        random) extra=() ;;
        full) extra=(--full --lr 0.001) ;;
    esac
    out=runs/universal/dyck-$kind-fresh-lengths-s0
    if [ -e "$out/result.json" ]; then
        echo "$out: finished"
        continue
    fi
    nice -n 15 python recipes/reprogram.py "${common[@]}" "${extra[@]}" --out "$out"
done
