#!/usr/bin/env bash
# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
#
# One device call (one GPU, at most 10 minutes) for issue 27 item 4 and issue 30's reaction:
#   1. the gpu-marked Real-Time Chunking tests (guided graphs against eager and LeRobot, bf16/fp16
#      cosines, no allocation in steady state): gpu_rtc_tests.log
#   2. python -m pi0_ros.tools.bench --rtc lerobot,jacobian: guided against plain calls at batch
#      1 and 8, full size, bf16 (bench_rtc.log, bench_rtc/bench.json)
#   3. benchmarks/node_gap/diagnose.sh, phases B_soak and B_on_chunk: the node under the GPU
#      soak's load with and without publish_on_chunk (node_gap/: table.txt, summary.json, ...)
#
#   here:   wheels in .whl (benchmarks/README.md, "GPU runs"), bash scripts/make_gpu_bundle.sh
#   device: OUT=$OUT bash benchmarks/run_rtc_and_reaction.sh
#           (carry ['.whl', '.gpusoak', 'benchmarks/node_gap/wheels'], timeout_s 600)
# Settings (environment): BUDGET (580 s for the whole script), RTC_TESTS_TIMEOUT (170),
# RTC_BENCH_TIMEOUT (200), ITERS (50), NODE_GAP_SCALE (0.6: phase lengths).
set -uo pipefail
OUT="${OUT:-reports/rtc_reaction}"
BUDGET="${BUDGET:-580}"
start=$SECONDS
mkdir -p "$OUT"
left() { echo $((BUDGET - (SECONDS - start))); }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
  | tee "$OUT/gpu.txt"
# conftest.py needs rclpy (not on the GPU machine); the engine tests need none of it.
PYTHONPATH=/tmp/site:$PWD timeout "${RTC_TESTS_TIMEOUT:-170}" python3 -m pytest --noconftest \
  -p no:cacheprovider -m gpu test/test_engine_rtc.py -q -rA 2>&1 | tail -40 \
  | tee "$OUT/gpu_rtc_tests.log"
echo "rtc tests done at $((SECONDS - start)) s"
PYTHONPATH=/tmp/site:$PWD timeout "${RTC_BENCH_TIMEOUT:-200}" python3 -m pi0_ros.tools.bench \
  --dims full --precision bf16 --device cuda --batches 1,8 --iters "${ITERS:-50}" \
  --skip-lerobot --rtc lerobot,jacobian --out "$OUT/bench_rtc" 2>&1 | tail -30 \
  | tee "$OUT/bench_rtc.log"
echo "rtc bench done at $((SECONDS - start)) s"
remaining=$(left)
if [ "$remaining" -gt 120 ]; then
  OUT="$OUT/node_gap" BENCH_ITERS=0 NODE_GAP_BUDGET=$((remaining - 15)) \
    PROBE_ARGS="--phases B_soak,B_on_chunk --scale ${NODE_GAP_SCALE:-0.6}" \
    bash benchmarks/node_gap/diagnose.sh 2>&1 | tail -25
else
  echo "node_gap skipped: ${remaining} s left"
fi
echo "done at $((SECONDS - start)) s"
