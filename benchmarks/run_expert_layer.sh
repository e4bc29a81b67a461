#!/usr/bin/env bash
# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
# GPU run for the device tool: the persistent expert-layer kernel (pi0_ros/engine/expert_layer.py)
# checked at full size, then batch 1 and 2 benchmarked with it (accuracy against LeRobot fp32,
# kernel table) and without it, in one process each. Every step has a time limit, so a kernel
# that hangs costs minutes, not the call. EXTRA='--kernel-config EXPERT_LAYER.KEY=VALUE ...'
# sets its tiles; BASE=0 skips the run without it. Results: $OUT/expert_layer.tgz and logs.
set -o pipefail
OUT=${OUT:-reports/expert_layer}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout "${TEST_LIMIT:-300}" python3 -m pytest --noconftest -p no:cacheprovider -m gpu \
  test/test_engine_kernels.py -k "${TESTS:-expert_layer or attention}" -q -x 2>&1 \
  | tail -20 | tee "$OUT/tests.log"
BENCH=(python3 -m pi0_ros.bench --dims full --precision bf16 --device cuda --skip-lerobot
       --iters "${ITERS:-100}" --batches "${BATCHES:-1,2}")
# shellcheck disable=SC2086
timeout "${BENCH_LIMIT:-240}" "${BENCH[@]}" --kernel-config EXPERT_LAYER_MAX_ROWS=128 ${EXTRA:-} \
  ${CHECK---check} --profile --profile-batches 1 --out /tmp/el/fused > "$OUT/fused.log" 2>&1
grep -E "batch|p50|cosine|rror|chunks|_expert_layer_kernel|_add_norm" "$OUT/fused.log" | tail -30
if [ "${BASE:-1}" = 1 ]; then
  timeout "${BENCH_LIMIT:-240}" "${BENCH[@]}" --out /tmp/el/base > "$OUT/base.log" 2>&1
  grep -E "batch|p50|chunks" "$OUT/base.log" | tail -10
fi
tar czf "$OUT/expert_layer.tgz" -C /tmp/el . 2>/dev/null
