# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
#
# Sourced by the GPU scripts (run_h200_soak.sh, run_fleet.sh, node_gap/diagnose.sh, ...):
# `ros_runtime ROOT` makes rclpy and pi0_ros.msg importable for $PYTHON.
#
# Here (.venv) they import already. The GPU machine has no ROS 2: the bundle's wheels
# (scripts/make_gpu_bundle.sh, carried as .gpusoak) are installed with --prefix (not --target,
# which leaves out the wheels' lib/ data, where the ROS C libraries are), this package's generated
# messages are copied into pi0_ros/ (where scripts/setup_env.sh puts them), and PYTHONPATH /
# LD_LIBRARY_PATH point at them, as the ROS wheels' bootstrapper does in a virtual environment.
# Settings (environment): PYTHON (python3), GPUSOAK_BUNDLE (.gpusoak), GPUSOAK_PREFIX
# (/tmp/pi0_ros_gpusoak).

ros_runtime() {
  local root="$1" python="${PYTHON:-python3}" prefix="${GPUSOAK_PREFIX:-/tmp/pi0_ros_gpusoak}"
  local bundle want have site libdir libs
  if (cd "$root" && "$python" -c 'import rclpy, pi0_ros.msg') 2>/dev/null; then
    echo 'ROS 2 runtime: already importable'
    return 0
  fi
  bundle="$(cd "$root" && cd "${GPUSOAK_BUNDLE:-.gpusoak}" 2>/dev/null && pwd)" \
    || { echo 'no .gpusoak/: run scripts/make_gpu_bundle.sh here and carry .gpusoak'; return 1; }
  want="$(awk '/^msg-sha256/ {print $2}' "$bundle/MANIFEST.txt")"
  have="$(cat "$root"/msg/*.msg | sha256sum | cut -d' ' -f1)"
  [ "$want" = "$have" ] || { echo 'the bundle was made for another msg/: make it again'; return 1; }
  head -1 "$bundle/MANIFEST.txt"
  rm -rf "$prefix"
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --disable-pip-version-check --prefix "$prefix" "$bundle"/wheels/*.whl || return 1
  site="$(find "$prefix" -maxdepth 6 -path '*-packages/rclpy/__init__.py' -print -quit)"
  site="${site%/rclpy/__init__.py}"
  libdir="$(dirname "$(find "$prefix" -maxdepth 3 -name librcl.so -print -quit)")"
  [ -d "$site/rclpy" ] && [ -f "$libdir/librcl.so" ] \
    || { echo "rclpy or librcl.so not found under $prefix"; return 1; }
  libs="$(find "$site" -maxdepth 1 -type d -name 'ros_*.libs' | sort | paste -sd:)"
  cp -r "$bundle/interfaces/pi0_ros/." "$root/pi0_ros/"
  export PYTHONPATH="$root:$site${PYTHONPATH:+:$PYTHONPATH}"
  LD_LIBRARY_PATH="$libdir:$bundle/interfaces/lib:$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
  (cd "$root" && "$python" -c 'import rclpy; from pi0_ros.msg import ActionChunk') || return 1
  echo "ROS 2 runtime: installed from $bundle"
}

# `lerobot_ros_runtime ROOT`: what the fleet scripts (run_fleet.sh, run_fleet_profile.sh) need on
# the GPU machine: the carried wheels (.whl: LeRobot and the transformers it was made for) in
# /tmp/site ahead of ROOT on PYTHONPATH, Fast DDS on this host only, then ros_runtime.
lerobot_ros_runtime() {
  local root="$1"
  "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site "$root"/.whl/*.whl || return 1
  export PYTHONPATH="/tmp/site:$root" PYTHONUNBUFFERED=1
  export RMW_IMPLEMENTATION=rmw_fastrtps_cpp ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
  ros_runtime "$root"
}
