#!/usr/bin/env bash
# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
# GPU run for the device tool (one H200): GPU tests, kernel tuning, full-size equivalence check,
# benchmark against LeRobot.
# Usage (device tool, carry ['.whl']): bash benchmarks/run_h200.sh
#   TUNE=1 (default) times the Triton kernels' configurations first (benchmarks/tune_kernels.py)
#   and benchmarks with the best ones applied; TUNE=0 benchmarks the configurations committed in
#   pi0_ros/engine/kernel_configs.py. PDL_AB=1 first benchmarks batch 1 without programmatic
#   dependent launch (bench_nopdl.log). BATCHES (sweep), PROFILE_BATCHES
#   (kernel tables), MEMORY_SWEEP (max_batch values whose peak memory is measured against the
#   planner's estimate) set the benchmark's sweeps. FP8_PREFIX=1 also benchmarks the FP8 prefix
#   MLP (bench_fp8_prefix.log/.json, with --check), in the layers FP8_PREFIX_LAYERS (e.g.
#   8,9,10,11,12,13,14,15,16; default all). EXPERIMENTS=1 also runs
#   benchmarks/prefix_experiments.py (prefix_experiments.json). VARIANT='--kernel-config ...'
#   also benchmarks batch 1 and 8 with those switches (bench_variant.log/.json).
#   ABLATION=1 also times the denoiser with kernel families left out (denoise_ablation.json).
#   FLOOR=1 also measures the launch floor (benchmarks/launch_floor.py, launch_floor.json).
#   RTC=lerobot,jacobian (or one of them) also times Real-Time Chunking guided calls against
#   plain ones at batch 1 and 8, one engine per mode (bench --rtc: jacobian False/True;
#   bench_rtc.log/.json; at most RTC_TIMEOUT s, default 300).
# Wheels in .whl: lerobot 0.6.1, transformers 5.5.4, tokenizers 0.22.2 and lerobot's missing deps.
set -o pipefail
OUT=${OUT:-reports/h200}
mkdir -p "$OUT/bench_full"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
python3 -c 'import torch, transformers, lerobot; print(torch.__version__, transformers.__version__)'
# conftest.py needs rclpy (not on the GPU machine); the engine tests need none of it.
python3 -m pytest --noconftest -p no:cacheprovider -m gpu test/test_engine_gpu.py \
  test/test_engine_rtc.py test/test_engine_kernels.py -q -s 2>&1 | tee "$OUT/gpu_tests.log"
BENCH=(--dims full --precision bf16 --device cuda --batches "${BATCHES:-1,2,3,4,6,8,12,16}"
       --iters "${ITERS:-100}" --lerobot-iters "${LEROBOT_ITERS:-20}" --check --profile
       --profile-batches "${PROFILE_BATCHES:-1,8}" --memory-sweep "${MEMORY_SWEEP:-1,2,4,8,16}"
       --out "$OUT/bench_full")
if [ "${PDL_AB:-0}" = 1 ]; then
  # The same engine without programmatic dependent launch, batch 1 (A/B in one run).
  python3 -m pi0_ros.tools.bench --dims full --precision bf16 --device cuda --batches 1 \
    --iters "${ITERS:-100}" --skip-lerobot --no-pdl --out /tmp/bench_nopdl 2>&1 \
    | tee "$OUT/bench_nopdl.log"
fi
if [ -n "${VARIANT:-}" ]; then
  # The engine with other kernel switches (e.g. VARIANT='--kernel-config PREFETCH_WEIGHTS_MAX_ROWS=0').
  # shellcheck disable=SC2086
  python3 -m pi0_ros.tools.bench --dims full --precision bf16 --device cuda --batches 1,8 \
    --iters "${ITERS:-100}" --skip-lerobot $VARIANT --out /tmp/bench_variant 2>&1 \
    | tee "$OUT/bench_variant.log"
  cp /tmp/bench_variant/bench.json "$OUT/bench_variant.json"
fi
if [ "${FP8_PREFIX:-0}" = 1 ]; then
  # FP8 activations + weights for the prefix MLP's gate/up: speed at batch 1 and 8, accuracy.
  python3 -m pi0_ros.tools.bench --dims full --precision bf16 --device cuda --batches 1,8 \
    --iters "${ITERS:-100}" --skip-lerobot --check --fp8-prefix \
    --fp8-prefix-layers "${FP8_PREFIX_LAYERS:-}" --out /tmp/bench_fp8_prefix \
    2>&1 | tee "$OUT/bench_fp8_prefix.log"
  cp /tmp/bench_fp8_prefix/bench.json "$OUT/bench_fp8_prefix.json"
fi
if [ -n "${RTC:-}" ]; then
  # Guided (Real-Time Chunking) calls against plain ones, same weights, previous chunk = the
  # last call's normalized actions after a 3-step delay; every guided call must be applied.
  timeout "${RTC_TIMEOUT:-300}" python3 -m pi0_ros.tools.bench --dims full --precision bf16 \
    --device cuda --batches 1,8 --iters "${ITERS:-100}" --skip-lerobot --rtc "$RTC" \
    --out /tmp/bench_rtc 2>&1 | tee "$OUT/bench_rtc.log"
  cp /tmp/bench_rtc/bench.json "$OUT/bench_rtc.json"
fi
if [ "${ABLATION:-0}" = 1 ]; then
  # The denoiser with one kernel family left out at a time (what each costs in the graph).
  python3 benchmarks/denoise_ablation.py --json "$OUT/denoise_ablation.json" --batches 1,8 \
    2>&1 | tail -14
fi
if [ "${FLOOR:-0}" = 1 ]; then
  # The launch floor of a chain of dependent kernels and the expert's projections per layer.
  python3 benchmarks/launch_floor.py --json "$OUT/launch_floor.json" 2>&1 | tail -8
fi
if [ "${EXPERIMENTS:-0}" = 1 ]; then
  # Measurements for the next prefix optimizations (SDPA attention, FP8 projections).
  python3 benchmarks/prefix_experiments.py --json "$OUT/prefix_experiments.json" 2>&1 \
    | tail -20
fi
if [ "${TUNE:-1}" = 1 ]; then
  python3 benchmarks/tune_kernels.py --json "$OUT/kernel_tuning.json" --apply-best "${BENCH[@]}" \
    2>&1 | tee "$OUT/bench_full.log"
else
  python3 -m pi0_ros.tools.bench "${BENCH[@]}" 2>&1 | tee "$OUT/bench_full.log"
fi
