#!/usr/bin/env bash
# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
#
# Where a fleet's engine calls go (issue 28), in ONE device call (one GPU): the fleet benchmark
# at one arm count, once per chunk hand-over, each with py-spy sampling every thread of the
# fleet process (idle included: a thread blocked in a CUDA synchronize shows there) while the
# arms are followed.
#
#   here:   bash scripts/make_gpu_bundle.sh; py-spy wheel in benchmarks/node_gap/wheels
#   device: OUT=$OUT bash benchmarks/run_fleet_profile.sh
#           (carry ['.whl', '.gpusoak', 'benchmarks/node_gap/wheels'])
# Settings (environment): ARMS (8), MODES (rtc,blend), FLEET_ARGS ('--max-batch 4'),
# DURATION (15 s recorded per run), PROFILE_AFTER (45 s from the fleet's start), PROFILE_S (10),
# PYSPY_ARGS (--idle; --gil samples only the thread that holds the GIL: what the others wait on).
# A mode is a chunk hand-over, optionally with other parameters of every node, each after a slash:
# MODES=blend,blend/gil_switch_interval:=0.00005 (run folder blend_gil_switch_interval_0.00005),
# MODES=blend/prefix_fp8_layers:=4-16/publish_on_chunk:=true. A mode given again gets its run
# number (MODES=blend,blend/frame_graph:=false,blend: folders blend, ..., blend_run3).
# Out: $OUT/<run>/fleet.json and $OUT/fleet_profile.tar.gz holding everything: per run
# fleet.json, fleet.png, pyspy.txt (raw stacks per thread, with counts), logs.tar.gz, <run>.log.
set -uo pipefail
OUT="${OUT:-reports/fleet_profile}"
mkdir -p "$OUT"
# shellcheck source=ros_runtime.sh
source "$(dirname "${BASH_SOURCE[0]}")/ros_runtime.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/pyspy benchmarks/node_gap/wheels/py_spy-*.whl || exit 1
lerobot_ros_runtime "$PWD" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
IFS=, read -ra entries <<< "${MODES:-rtc,blend}"
runs=()
for entry in "${entries[@]}"; do
  handover="${entry%%/*}"
  extra=()
  if [ "$entry" != "$handover" ]; then
    IFS=/ read -ra parameters <<< "${entry#*/}"
    for parameter in "${parameters[@]}"; do extra+=(--node-parameter "$parameter"); done
  fi
  mode="$(echo "$entry" | sed 's#/#_#g; s#:=#_#g')"
  # A mode given again (an A/B in turns: MODES=a,b,a,b) gets its run number.
  if [[ " ${runs[*]} " == *" $mode "* ]]; then mode="${mode}_run$(( ${#runs[@]} + 1 ))"; fi
  runs+=("$mode")
  echo "== $mode: ${ARMS:-8} arms, ${FLEET_ARGS:---max-batch 4}"
  # shellcheck disable=SC2086
  timeout --signal=INT --kill-after=20 170 python3 -m pi0_ros.tools.fleet_bench \
    --arms "${ARMS:-8}" --duration "${DURATION:-15}" --device cuda --random-model full \
    --precision bf16 --output "$OUT/$mode" --node-parameter "chunk_handover:=$handover" \
    "${extra[@]}" ${FLEET_ARGS:---max-batch 4} > "$OUT/$mode.log" 2>&1 &
  bench=$!
  mkdir -p "$OUT/$mode"
  sleep "${PROFILE_AFTER:-45}"
  pid="$(pgrep -f 'pi0_ros.fleet ' | head -1)"
  if [ -n "$pid" ]; then
    # shellcheck disable=SC2086
    /tmp/pyspy/bin/py-spy record --pid "$pid" --duration "${PROFILE_S:-10}" --rate 200 \
      ${PYSPY_ARGS:---idle} --threads --format raw --output "$OUT/$mode/pyspy.txt" --nonblocking \
      > "$OUT/$mode/pyspy.log" 2>&1
  else
    echo "no fleet process to profile"
  fi
  wait "$bench"
  grep -v -i warn "$OUT/$mode.log" | tail -4
  tar czf "$OUT/$mode/logs.tar.gz" -C "$OUT/$mode" logs 2>/dev/null && rm -rf "$OUT/$mode/logs"
done
# The device tool returns at most 8 files: everything in one archive, the reports beside it.
tar czf /tmp/fleet_profile.tar.gz -C "$OUT" . && mv /tmp/fleet_profile.tar.gz "$OUT/"
for mode in "${runs[@]}"; do
  find "$OUT/$mode" -type f ! -name fleet.json -delete
  rm -f "$OUT/$mode.log"
done
echo "done at $SECONDS s"
