#!/usr/bin/env bash
# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
#
# Issue 28 item 4 in ONE device call (one GPU): several arms on one engine, and LeRobot in the
# same call.
#   1. python -m pi0_ros.tools.fleet_bench: N = 1, 2, 4, 8 arms (the fleet process with Pi0's
#      full-size random model, bf16; per arm two feeder processes: three cameras, joint states),
#      per arm chunks/s, chunk latency, engine call, command rate (fleet/fleet.json, fleet.png)
#   2. python -m pi0_ros.tools.bench at batch 1 and 8 with LeRobot's predict_action_chunk in the
#      same process (bench/bench.json): what one engine call and LeRobot's cost for 1 and 8 arms
#
#   here:   wheels in .whl (benchmarks/README.md, "GPU runs"), bash scripts/make_gpu_bundle.sh
#   device: OUT=$OUT bash benchmarks/run_fleet.sh   (carry ['.whl', '.gpusoak'], timeout_s 600)
# Settings (environment): BUDGET (575 s for the whole script), ARMS (1,2,4,8), DURATION (15 s per
# count), FRAME (640x480), CAMERA_RATE (30), FLEET_TIMEOUT (340), FLEET_ARGS (more fleet_bench
# options, e.g. '--node-parameter encode_frames_ahead:=false'), FLEET_OUT (fleet: its folder),
# BENCH (1; 0 skips step 2), LEROBOT_ITERS (5).
set -uo pipefail
OUT="${OUT:-reports/fleet}"
BUDGET="${BUDGET:-575}"
start=$SECONDS
mkdir -p "$OUT"
# shellcheck source=ros_runtime.sh
source "$(dirname "${BASH_SOURCE[0]}")/ros_runtime.sh"

lerobot_ros_runtime "$PWD" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
  | tee "$OUT/gpu.txt"
frame="${FRAME:-640x480}"
echo "== fleet_bench (at most ${FLEET_TIMEOUT:-340} s)"
# shellcheck disable=SC2086
timeout --signal=INT --kill-after=20 "${FLEET_TIMEOUT:-340}" python3 -m pi0_ros.tools.fleet_bench \
  --arms "${ARMS:-1,2,4,8}" --duration "${DURATION:-15}" --device cuda --random-model full \
  --precision bf16 --image-width "${frame%x*}" --image-height "${frame#*x}" \
  --camera-rate "${CAMERA_RATE:-30}" --output "$OUT/${FLEET_OUT:-fleet}" ${FLEET_ARGS:-} 2>&1 \
  | grep -v -i 'warn' | tail -30
tar czf "$OUT/${FLEET_OUT:-fleet}_logs.tar.gz" -C "$OUT/${FLEET_OUT:-fleet}" logs 2>/dev/null \
  && rm -rf "$OUT/${FLEET_OUT:-fleet}/logs"
echo "fleet done at $((SECONDS - start)) s"
remaining=$((BUDGET - (SECONDS - start) - 10))
if [ "${BENCH:-1}" = 1 ] && [ "$remaining" -gt 90 ]; then
  echo "== bench with LeRobot, batch 1 and 8 (at most ${remaining} s)"
  timeout --signal=INT --kill-after=10 "$remaining" python3 -m pi0_ros.tools.bench --dims full \
    --precision bf16 --device cuda --batches 1,8 --iters 30 --lerobot-iters "${LEROBOT_ITERS:-5}" \
    --cameras 3 --state-dim 6 --action-dim 6 --out "$OUT/bench" 2>&1 | grep -v -i 'warn' \
    | tail -25
else
  echo "bench skipped: ${remaining} s left"
fi
echo "done at $((SECONDS - start)) s"
