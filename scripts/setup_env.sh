#!/usr/bin/env bash
# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
#
# One environment step for everything: find Python 3.12, create .venv, install the pinned
# requirements, generate msg/ with cmake + rosidl against the ROS 2 wheels, install pi0_ros.
# Idempotent: each step is skipped when its inputs have not changed since it last succeeded.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PI0_ROS_VENV:-$ROOT/.venv}"
STAMPS="$VENV/.pi0_ros_stamps"
log() { printf '[setup] %s\n' "$*" >&2; }

is_py312() { "$@" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }

find_python312() {
  local candidate version
  if [ -n "${PYTHON:-}" ] && is_py312 "$PYTHON"; then echo "$PYTHON"; return; fi
  for candidate in python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12; do
    if command -v "$candidate" >/dev/null 2>&1 && is_py312 "$candidate"; then
      command -v "$candidate"; return
    fi
  done
  # pyenv: a 3.12 interpreter that is installed but not the selected version.
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  for version in $(ls -1 "$pyenv_root/versions" 2>/dev/null | grep -E '^3\.12(\.[0-9]+)?$' | sort -V -r); do
    candidate="$pyenv_root/versions/$version/bin/python3.12"
    if [ -x "$candidate" ] && is_py312 "$candidate"; then echo "$candidate"; return; fi
  done
  return 1
}

# Hash of the given files' contents; an argument that is no file is hashed as text.
digest() {
  local arg
  for arg in "$@"; do if [ -f "$arg" ]; then cat "$arg"; else echo "$arg"; fi; done \
    | sha256sum | cut -d' ' -f1
}
up_to_date() { [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }
mark_done() { mkdir -p "$STAMPS"; echo "$2" > "$STAMPS/$1"; }

# 1. Python 3.12 virtual environment.
if [ ! -x "$VENV/bin/python" ] || ! is_py312 "$VENV/bin/python"; then
  PY312="$(find_python312)" || { log 'Python 3.12 not found (tried PATH and pyenv); install it.'; exit 1; }
  log "creating $VENV with $PY312"
  rm -rf "$VENV"
  "$PY312" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)

# 2. Pinned requirements.
req_digest="$(digest "$ROOT/requirements.txt")"
if ! up_to_date requirements "$req_digest"; then
  log 'installing pinned requirements (first time: a few minutes)'
  "${PIP[@]}" install -q -r "$ROOT/requirements.txt" 2>&1 | grep -v '^WARNING: Location' || true
  "${PIP[@]}" check >/dev/null || log 'pip check reports inconsistencies (see pip check)'
  "$PY" -c 'import rclpy, torch, lerobot, mujoco, cv2' \
    || { log 'requirements did not install'; exit 1; }
  mark_done requirements "$req_digest"
fi

# 3. Interfaces: rosidl through cmake, installed into the venv prefix (ROS wheels' layout).
site_packages="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
msg_digest="$(digest "$ROOT"/msg/*.msg "$ROOT"/srv/*.srv "$ROOT/CMakeLists.txt" "$ROOT/package.xml" "$req_digest")"
if ! up_to_date interfaces "$msg_digest" || [ ! -d "$ROOT/pi0_ros/msg" ] || [ ! -d "$ROOT/pi0_ros/srv" ]; then
  log 'generating interfaces from msg/ (cmake + rosidl, about a minute)'
  # The wheels' exported *__rosidl_generator_py targets name the Python include directories of the
  # machine that built them; point them at this interpreter's.
  py_include="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  np_include="$("$PY" -c 'import numpy; print(numpy.get_include())')"
  for f in "$VENV"/share/*/cmake/*__rosidl_generator_pyExport.cmake; do
    sed -i -E \
      -e "s#/opt/python/cp312-cp312/include/python3\.12#$py_include#g" \
      -e "s#/opt/python/cp312-cp312/lib/python3\.12/site-packages/numpy/_core/include#$np_include#g" \
      "$f"
  done
  build="$ROOT/build/interfaces"
  rm -rf "$build"; mkdir -p "$ROOT/build"
  (
    export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV" PATH="$VENV/bin:$PATH"
    cmake -S "$ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
      -DPI0_ROS_INSTALL_PYTHON_PACKAGE=OFF -DCMAKE_INSTALL_PREFIX="$VENV" \
      -DPython3_EXECUTABLE="$PY" -DPYTHON_EXECUTABLE="$PY" >"$ROOT/build/interfaces-cmake.log" 2>&1 \
      && cmake --build "$build" -j "$(nproc)" >>"$ROOT/build/interfaces-cmake.log" 2>&1 \
      && cmake --install "$build" >>"$ROOT/build/interfaces-cmake.log" 2>&1
  ) || { log "interface build failed; see build/interfaces-cmake.log"; tail -30 "$ROOT/build/interfaces-cmake.log" >&2; exit 1; }
  # The generated Python (pi0_ros.msg and its typesupport extensions) joins the source package,
  # which the venv installs editable; the C libraries stay in $VENV/lib, on the wheels' library path.
  generated="$site_packages/pi0_ros"
  rm -rf "$ROOT/pi0_ros/msg" "$ROOT/pi0_ros/srv" "$ROOT"/pi0_ros/*.so "$ROOT"/pi0_ros/_pi0_ros_s.ep.*
  cp -r "$generated/msg" "$generated/srv" "$generated"/*.so "$generated"/_pi0_ros_s.ep.* "$ROOT/pi0_ros/"
  rm -rf "$generated" "$site_packages"/pi0_ros-*.egg-info
  mark_done interfaces "$msg_digest"
fi

# 4. This package, editable, so the tests and the demo run the working tree.
pkg_digest="$(digest "$ROOT/setup.py" "$ROOT/setup.cfg" "$req_digest")"
if ! up_to_date package "$pkg_digest"; then
  log 'installing pi0_ros (editable)'
  "${PIP[@]}" install -q --no-deps --no-build-isolation -e "$ROOT" 2>&1 | grep -v '^WARNING: Location' || true
  mark_done package "$pkg_digest"
fi

"$PY" -c 'from pi0_ros.msg import ActionChunk, PolicyStatus; from pi0_ros.srv import ResetEpisode' \
  || { log 'pi0_ros.msg / pi0_ros.srv do not import'; exit 1; }
log "environment ready: $VENV"
