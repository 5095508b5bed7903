#!/usr/bin/env bash
# Gemma-3-270M's step time under the published protocol (the paper's words), float32 and bf16 autocast, at the row
# lengths of the words run's m = 1 and m = 5 rows (L = 26 and 116 tokens counting the BOS, plus m = 1 memory vector):
# 12 rows a batch (the run's batch), 10 steps each, 2 threads. Prints seconds per batch step from the rows' own wall
# times (their steps + 1 forwards). Output: results/gemma-3-270m/step-time.log. Run it on quiet cores: it times.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
for autocast in none bf16; do for L in 26 116; do
    python recipes/cram.py --model gemma-3-270m --protocol published --source words:glove --ms 1 --lengths $L \
        --num-sequences 12 --batch-size 12 --max-steps 10 --autocast $autocast --output "$tmp/L$L-$autocast" \
        > "$tmp/L$L-$autocast.log" 2>&1
    python - "$tmp/L$L-$autocast" "$autocast" "$L" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1] + "/rows.jsonl")]
seconds = max(r["seconds"] for r in rows)
forwards = max(r["steps"] for r in rows) + 1
tokens = len(rows) * (int(sys.argv[3]) + 1)
print(f"autocast {sys.argv[2]}, L = {sys.argv[3]}: {len(rows)} rows x {forwards} forwards, {seconds / forwards:.2f} s "
      f"a batch step, {tokens * forwards / seconds:.1f} token-steps/s")
PY
done; done
rm -r "$tmp"
