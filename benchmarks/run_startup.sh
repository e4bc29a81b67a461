#!/usr/bin/env bash
# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
#
# Issue 30's start-up figure in ONE device call (one GPU): seconds from the control node's process
# start to its first command from a chunk, with Pi0's full-size random model (bf16), under the GPU
# soak's load (3x 640x480 at 30 Hz, joint states at 500 Hz), twice:
#   cold  an empty Triton cache (a fresh machine: every kernel compiles)
#   warm  the same cache again (a machine that has run the node before)
# Each is a short python -m pi0_ros.tools.soak whose summary.json holds startup_s (first command,
# first chunk, first command from a chunk, all from the node process's start).
#
#   here:   bash scripts/make_gpu_bundle.sh                 (.gpusoak/: ROS 2 wheels + messages)
#   device: OUT=$OUT bash benchmarks/run_startup.sh         (carry ['.gpusoak'], timeout_s 600)
# Settings (environment): BUDGET (560 s for the whole script), DURATION (20 s per soak),
# SOAK_ARGS (more soak options, e.g. "--node-parameter publish_on_chunk:=True").
set -uo pipefail
OUT="${OUT:-reports/startup}"
BUDGET="${BUDGET:-560}"
start=$SECONDS
mkdir -p "$OUT"
# shellcheck source=ros_runtime.sh
source "$(dirname "${BASH_SOURCE[0]}")/ros_runtime.sh"
ros_runtime "$PWD" || exit 1
export RMW_IMPLEMENTATION=rmw_fastrtps_cpp ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=/tmp/pi0_ros_startup_triton
rm -rf "$TRITON_CACHE_DIR"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
for phase in cold warm; do
  remaining=$((BUDGET - (SECONDS - start) - 10))
  [ "$remaining" -gt 60 ] || { echo "$phase skipped: ${remaining} s left"; continue; }
  echo "== $phase Triton cache (at most ${remaining} s)"
  # shellcheck disable=SC2086
  timeout --signal=INT --kill-after=20 "$remaining" python3 -m pi0_ros.tools.soak \
    --duration "${DURATION:-20}" --warmup 5 --device cuda --random-model full --precision bf16 \
    --startup-timeout 240 --output "$OUT/$phase" ${SOAK_ARGS:-} 2>&1 | grep -v -i warn | tail -8
  rm -f "$OUT/$phase"/feeder_*.json "$OUT/$phase"/*.png
  python3 -c "import json,sys; print('$phase startup_s', json.load(open(sys.argv[1]))['startup_s'])" \
    "$OUT/$phase/summary.json"
done
echo "done at $((SECONDS - start)) s"
