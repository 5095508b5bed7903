#!/usr/bin/env bash
# Re-measure every figure that README.md and BENCHMARKS.md quote, with the harness's repeats, ranges and load check.
#
#     benchmarks/remeasure_all.sh                       # everything that runs on this machine (CPU: about 2 hours)
#     benchmarks/remeasure_all.sh cram_bf16 reprogram   # only these (names below)
#     REPEATS=5 PYTHON=.venv/bin/python OUT=results/benchmarks benchmarks/remeasure_all.sh
#
# Run it on a quiet machine: nothing else busy, the 1-minute load average well under the CPU count before it starts.
# Each benchmark writes OUT/<name>.json (the harness's record: medians, ranges, per-repeat values, counts, the
# load average at start and end and its highest value, "quiet": true or false) and OUT/<name>.log (what it printed).
# A record with "quiet": false was measured under load and must not be quoted; the summary at the end lists them.
# The GPU-only figures (cram_h200, cram_memory_large_vocab) run only where torch sees a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python}
OUT=${OUT:-results/benchmarks}
REPEATS=${REPEATS:-3}
mkdir -p "$OUT"
export TQDM_DISABLE=1

declare -A COMMANDS=(
  [reprogram]="benchmarks/reprogram_vs_stock_peft.py"
  [cram_bf16]="benchmarks/cram_throughput.py --repeats $REPEATS"
  [cram_bf16_2proc]="benchmarks/cram_throughput.py --processes 2 --repeats $REPEATS"
  [cram_bf16_len6]="benchmarks/cram_throughput.py --length 6 --max-steps 100 --batch-size 16 --repeats $REPEATS"
  [cram_fp32]="benchmarks/cram_throughput.py --autocast none --repeats $REPEATS"
  [cram_fp32_len6]="benchmarks/cram_throughput.py --length 6 --max-steps 100 --batch-size 16 --autocast none --repeats $REPEATS"
  [cpu_attention]="benchmarks/cpu_attention_kernels.py --rounds $REPEATS"
  [cast_weights_once]="benchmarks/cast_weights_once.py --lengths 26 116 193 --rows 8 --steps 2 --repeats $REPEATS"
  [geometry_cells]="benchmarks/geometry_cells.py --model smollm2-135m --samples 8192 --repeats $REPEATS"
  [cram_h200]="benchmarks/cram_throughput.py --model /tmp/smollm2-random --num-sequences 16 --length 256 --batch-size 16 --max-steps 50 --repeats $REPEATS"
  [cram_memory_large_vocab]="benchmarks/cram_memory_large_vocab.py"
)
CPU_ORDER=(reprogram cram_bf16 cram_bf16_2proc cram_bf16_len6 cram_fp32 cram_fp32_len6 cpu_attention cast_weights_once geometry_cells)
GPU_ORDER=(cram_h200 cram_memory_large_vocab)

if [ $# -gt 0 ]; then
  NAMES=("$@")
else
  NAMES=("${CPU_ORDER[@]}")
  if "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    NAMES+=("${GPU_ORDER[@]}")
  fi
fi
for name in "${NAMES[@]}"; do
  if [ -z "${COMMANDS[$name]+x}" ]; then
    echo "unknown benchmark '$name'; choose from: ${CPU_ORDER[*]} ${GPU_ORDER[*]}" >&2
    exit 2
  fi
done

echo "load average before starting: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs; results in $OUT"
if [[ " ${NAMES[*]} " == *" cram_h200 "* ]] && [ ! -d /tmp/smollm2-random ]; then
  "$PYTHON" benchmarks/random_init_copy.py smollm2-135m /tmp/smollm2-random
fi
for name in "${NAMES[@]}"; do
  # reprogram_vs_stock_peft's repeats are its timed steps (default 6); the others take --repeats / --rounds above.
  echo "=== $name: python ${COMMANDS[$name]} --json $OUT/$name.json"
  # shellcheck disable=SC2086  # the command is a list of words on purpose
  "$PYTHON" ${COMMANDS[$name]} --json "$OUT/$name.json" 2>&1 | tee "$OUT/$name.log"
done

"$PYTHON" - "$OUT" "${NAMES[@]}" <<'PY'
import json, sys
from pathlib import Path
out, names = Path(sys.argv[1]), sys.argv[2:]
loud = [n for n in names if not json.loads((out / f"{n}.json").read_text())["quiet"]]
print(f"{len(names) - len(loud)} of {len(names)} records quiet" +
      (f"; measured under load, do not quote: {', '.join(loud)}" if loud else ""))
PY
