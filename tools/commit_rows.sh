#!/usr/bin/env bash
# Commit a long run's folder (rows.jsonl or runs.jsonl, inflight/ snapshots or checkpoints, settings, reports) every few minutes, that folder's
# paths only, so that a session that ends mid-run loses at most that much of it:
#   nohup bash tools/commit_rows.sh results/gemma-3-270m/pooled-words-glove 20 > /work/logs/commit_rows.log 2>&1 &
# Other work in the checkout is never staged or committed by it. Retries when another git command holds the index.
set -u
folder=${1:?usage: tools/commit_rows.sh FOLDER [MINUTES]}
minutes=${2:-20}
cd "$(dirname "$0")/.."
while true; do
    sleep $((minutes * 60))
    for _ in 1 2 3 4 5; do
        if git add -A -- "$folder" 2>/dev/null; then
            git diff --cached --quiet -- "$folder" && break
            rows=$(cat "$folder/rows.jsonl" "$folder/runs.jsonl" 2>/dev/null | grep -c .)  # a sweep's, or the UT runs'
            git commit -q -m "$(basename "$(dirname "$folder")") $(basename "$folder"): $rows rows and snapshots at $(date +%H:%M)" -- "$folder" && break
        fi
        sleep 7
    done
done
