#!/usr/bin/env bash
# This machine's long measurements, one heavy job at a time on the 2 cores (issue 22): the random-words run until its
# design stops (then its calibration and checks, finish-pooled-words.sh), then the natural-text run. Restart it after
# any interruption (each step resumes or skips what is done):
#   nohup bash results/smollm2-135m/run-queue.sh > /work/logs/smollm2.log 2>&1 &
cd "$(dirname "$0")/../.."
bash results/smollm2-135m/run-pooled-words.sh || exit $?
exec bash results/smollm2-135m/run-pooled-text.sh
