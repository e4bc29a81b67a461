#!/usr/bin/env bash
# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
#
# Issue 30: where the control node's inference milliseconds go, in ONE device call (one GPU):
#   1. python -m pi0_ros.tools.bench, batch 1, the node's frame size and joint count (separate process)
#   2. benchmarks/node_gap/probe.py: the control node in-process with timing wrappers, the bench's
#      calls on the node's own engine (no load), then the GPU soak's load (3 x 640x480 at 30 Hz,
#      joint states at 500 Hz) and variants of it, py-spy on the process (see probe.py's header).
#
#   here:   bash scripts/make_gpu_bundle.sh           (.gpusoak/: ROS 2 wheels + messages)
#           python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#             --implementation cp --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
#             -d benchmarks/node_gap/wheels py-spy==0.4.3      (ignored by node_gap/.gitignore)
#   device: bash benchmarks/node_gap/diagnose.sh
#           (carry ['.gpusoak', 'benchmarks/node_gap/wheels'], timeout_s 600)
#   CPU check here: DRY_RUN=1 PYTHON=.venv/bin/python OUT=/tmp/node_gap bash benchmarks/node_gap/diagnose.sh
#
# Files in $OUT (6): diagnose.log (everything printed), table.txt, summary.json,
# records.jsonl.gz (one line per inference), pyspy.tar.gz (raw py-spy stacks), bench.json.
# Settings (environment): PYTHON (python3), NODE_GAP_BUDGET (560: seconds for the whole script;
# the probe is interrupted with SIGINT at the end of it and still writes its files),
# BENCH_ITERS (100; 0 skips the separate bench), PROBE_ARGS (more probe.py options, e.g.
# '--scale 0.5' or '--phases A_all3,A_last_cam,B_soak'), GPUSOAK_BUNDLE (.gpusoak).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT" || exit 1
OUT="${OUT:-reports/node_gap}"
PYTHON="${PYTHON:-python3}"
BUDGET="${NODE_GAP_BUDGET:-560}"
DRY_RUN="${DRY_RUN:-0}"
BENCH_ITERS="${BENCH_ITERS:-100}"
mkdir -p "$OUT"

# shellcheck source=../ros_runtime.sh
source "$ROOT/benchmarks/ros_runtime.sh"

main() {
  local pyspy='' wheel remaining bench_timeout rc
  local -a bench_args probe_args
  export RMW_IMPLEMENTATION=rmw_fastrtps_cpp ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
  export PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  ros_runtime "$ROOT" || return 1
  wheel="$(ls "$HERE"/wheels/py_spy-*.whl 2>/dev/null | head -1)"
  if [ -n "$wheel" ] && "$PYTHON" -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --disable-pip-version-check --upgrade --target /tmp/node_gap_pyspy \
      "$wheel" && [ -x /tmp/node_gap_pyspy/bin/py-spy ]; then
    pyspy=/tmp/node_gap_pyspy/bin/py-spy
    echo "py-spy: $("$pyspy" --version)"
  else
    echo 'py-spy: not available (carry benchmarks/node_gap/wheels); a Python sampler instead'
  fi
  command -v nvidia-smi >/dev/null \
    && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
         --format=csv,noheader
  "$PYTHON" -c 'import sys, torch, numpy; print(f"python {sys.version.split()[0]}, torch",
    torch.__version__, "cuda", torch.cuda.is_available(), "numpy", numpy.__version__)'

  if [ "$DRY_RUN" = 1 ]; then
    bench_args=(--dims tiny --device cpu --precision auto)
    probe_args=(--dry-run)
    BENCH_ITERS="$((BENCH_ITERS > 10 ? 10 : BENCH_ITERS))"
  else
    bench_args=(--dims full --device cuda --precision bf16)
    probe_args=()
  fi
  # 1. The bench as the issue quotes it, with the node's frame size and joint count (6).
  if [ "$BENCH_ITERS" -gt 0 ]; then
    bench_timeout=$(( BUDGET / 3 ))
    echo "== python -m pi0_ros.tools.bench (batch 1, ${BENCH_ITERS} calls, at most ${bench_timeout} s)"
    rm -rf /tmp/node_gap_bench
    timeout --signal=INT --kill-after=10 "$bench_timeout" \
      "$PYTHON" -m pi0_ros.tools.bench "${bench_args[@]}" --batches 1 --iters "$BENCH_ITERS" \
      --skip-lerobot --frame 480x640 --cameras 3 --state-dim 6 --action-dim 6 \
      --out /tmp/node_gap_bench 2>&1 | grep -v -i -E 'warning|warn\(' | tail -12
    [ -f /tmp/node_gap_bench/bench.json ] && cp /tmp/node_gap_bench/bench.json "$OUT/bench.json"
  fi
  # 2. The node in-process, instrumented (its last output is the table).
  remaining=$(( BUDGET - SECONDS - 10 ))
  echo "== benchmarks/node_gap/probe.py (${remaining} s left)"
  # shellcheck disable=SC2086
  timeout --signal=INT --kill-after=20 "$remaining" \
    "$PYTHON" "$HERE/probe.py" --out "$OUT" --budget "$(( remaining - 25 ))" \
    --bench-json /tmp/node_gap_bench/bench.json --pyspy "$pyspy" "${probe_args[@]}" \
    ${PROBE_ARGS:-}
  rc=$?
  echo "probe exit code $rc; files: $(cd "$OUT" && ls | paste -sd' ')"
  return "$rc"
}

main 2>&1 | tee "$OUT/diagnose.log"
exit "${PIPESTATUS[0]}"
