#!/usr/bin/env bash
# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
#
# GPU soak for the device tool (one H200): the control node with Pi0's full-size random model on
# cuda (bf16), fed three 640x480 cameras at 30 Hz and joint states at 500 Hz over real DDS, for
# DURATION seconds (default 300), then the soak's report (python -m pi0_ros.tools.soak).
#
#   here:   bash scripts/make_gpu_bundle.sh                 (.gpusoak/: ROS 2 wheels + messages)
#   device: bash benchmarks/run_h200_soak.sh [DURATION]     (carry ['.gpusoak'], timeout_s 600)
#
# The GPU machine has no ROS 2: benchmarks/ros_runtime.sh installs it from the bundle.
# Files back in $OUT (7 of the 8 the tool returns): soak_gpu.log (this script's output) and
# soak_gpu/ with summary.json, timeseries.png, control_period.png, control.log,
# feeder_cameras.log, feeder_joints.log.
# Settings (environment): PYTHON (python3), SOAK_DEVICE (cuda), SOAK_MODEL (full), SOAK_PRECISION
# (bf16), SOAK_ARGS (more options of python -m pi0_ros.tools.soak, e.g. '--warmup 20'), SOAK_BUDGET
# (570: seconds the whole script may take; the soak is interrupted with SIGINT, and still writes
# its report, so that the call ends inside the tool's 600 s), GPUSOAK_BUNDLE (.gpusoak),
# GPUSOAK_PREFIX (/tmp/pi0_ros_gpusoak).
set -uo pipefail

DURATION="${1:-300}"
OUT="${OUT:-reports/h200_soak}"
PYTHON="${PYTHON:-python3}"
DEVICE="${SOAK_DEVICE:-cuda}"
MODEL="${SOAK_MODEL:-full}"
PRECISION="${SOAK_PRECISION:-bf16}"
BUDGET="${SOAK_BUDGET:-570}"
REPORT="$OUT/soak_gpu"
# shellcheck source=ros_runtime.sh
source "$(dirname "${BASH_SOURCE[0]}")/ros_runtime.sh"

main() {
  local remaining rc
  ros_runtime "$PWD" || return 1
  export RMW_IMPLEMENTATION=rmw_fastrtps_cpp ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
  export PYTHONUNBUFFERED=1

  # Preflight (seconds): versions, the GPU, and one message of ours through DDS.
  command -v nvidia-smi >/dev/null \
    && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  DEVICE="$DEVICE" "$PYTHON" - <<'EOF' || return 1
import os
import sys

import cv2
import numpy
import rclpy
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
import torch
import transformers

from pi0_ros.msg import ActionChunk, PolicyStatus  # noqa: F401

print(f'python {sys.version.split()[0]}, torch {torch.__version__}, numpy {numpy.__version__}, '
      f'transformers {transformers.__version__}, opencv {cv2.__version__}, '
      f'rmw {rclpy.get_rmw_implementation_identifier()}')
if os.environ['DEVICE'].startswith('cuda') and not torch.cuda.is_available():
    sys.exit('CUDA is not available')
rclpy.init()
node = rclpy.create_node('pi0_ros_gpusoak_preflight')
latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
received = []
node.create_subscription(ActionChunk, 'preflight', received.append, latched)
node.create_publisher(ActionChunk, 'preflight', latched).publish(ActionChunk(total_ms=1.0))
for _ in range(100):
    rclpy.spin_once(node, timeout_sec=0.05)
    if received:
        break
node.destroy_node()
rclpy.try_shutdown()
if not received:
    sys.exit('preflight: no pi0_ros/ActionChunk came back over DDS')
print('preflight: rclpy, Fast DDS and pi0_ros.msg work')
EOF

  remaining=$((BUDGET - SECONDS - 20))
  if [ $((DURATION + 120)) -gt "$remaining" ]; then
    echo "warning: ${DURATION} s of soak + start-up may not fit the ${remaining} s left; the" \
         'soak is interrupted (and still reports) when the budget ends'
  fi
  timeout --signal=INT --kill-after=20 "$remaining" \
    "$PYTHON" -m pi0_ros.tools.soak --duration "$DURATION" --device "$DEVICE" \
    --random-model "$MODEL" --precision "$PRECISION" --output "$REPORT" ${SOAK_ARGS:-}
  rc=$?
  # The feeders' counters are in summary.json ('feeder'); fewer files for the tool to return.
  rm -f "$REPORT"/feeder_*.json
  echo "soak exit code $rc; files: $(cd "$OUT" && find . -type f | sort | paste -sd' ')"
  return "$rc"
}

mkdir -p "$REPORT"
main 2>&1 | tee "$OUT/soak_gpu.log"
exit "${PIPESTATUS[0]}"
