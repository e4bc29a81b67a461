#!/usr/bin/env bash
# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
#
# Assemble .gpusoak/, the folder the device tool carries to the GPU machine for
# benchmarks/run_h200_soak.sh: that machine has Python 3.12, torch, numpy, psutil, matplotlib,
# opencv, PyYAML, transformers and nvidia-ml-py, but no ROS 2 and no network. The folder holds
#   wheels/      the ROS 2 Jazzy runtime that the node, the feeders and the soak load (rclpy with
#                Fast DDS, the message packages), at the versions installed in .venv
#                from requirements.txt, for manylinux x86_64 / CPython 3.12, slimmed by
#                scripts/slim_wheels.py (no headers, CMake files or duplicate library copies);
#   interfaces/  this package's generated messages (scripts/setup_env.sh, gitignored):
#                pi0_ros/msg/*.py, pi0_ros/*.so (Python typesupport extensions) and lib/*.so (the
#                C/C++ typesupport libraries, found through LD_LIBRARY_PATH: they have no RPATH);
#   MANIFEST.txt what is in it, with the checksum of msg/*.msg it was generated from.
# Usage: bash scripts/make_gpu_bundle.sh        (needs pip access to PyPI; about a minute)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PI0_ROS_VENV:-$ROOT/.venv}"
BUNDLE="$ROOT/.gpusoak"
log() { printf '[gpu-bundle] %s\n' "$*" >&2; }

# Runtime distributions, by what loads them. Build-only ones (rosidl generators and CMake
# modules, ament_cmake, empy, lark, catkin_pkg) and what the GPU image already has (numpy,
# PyYAML, opencv-python-headless, ...) stay out.
RUNTIME=(
  # rclpy and its C stack: rcl, rmw through rmw_implementation, Fast DDS, logging, tracing.
  ros-rclpy ros-rcl ros-rcl-action ros-rcl-lifecycle ros-rcl-yaml-param-parser
  ros-rcl-logging-interface ros-rcl-logging-spdlog ros-rcutils ros-rcpputils ros-rmw
  ros-rmw-implementation ros-rmw-fastrtps-cpp ros-rmw-fastrtps-shared-cpp ros-rmw-dds-common
  ros-fastrtps ros-fastcdr ros-tracetools ros-rpyutils ros-ament-index-python
  # Type support: the libraries rmw loads per message type, and import_type_support.
  ros-rosidl-runtime-c ros-rosidl-runtime-cpp ros-rosidl-typesupport-c ros-rosidl-typesupport-cpp
  ros-rosidl-typesupport-fastrtps-c ros-rosidl-typesupport-fastrtps-cpp
  ros-rosidl-typesupport-introspection-c ros-rosidl-typesupport-introspection-cpp
  ros-rosidl-dynamic-typesupport ros-rosidl-dynamic-typesupport-fastrtps ros-rosidl-generator-py
  ros-rosidl-parser  # rosidl_parser.definition: every generated message module imports it
  # Messages and services: what the node, the feeders and the soak use, and what rclpy imports.
  ros-builtin-interfaces ros-std-msgs ros-std-srvs ros-sensor-msgs ros-geometry-msgs
  ros-trajectory-msgs ros-diagnostic-msgs ros-rcl-interfaces ros-lifecycle-msgs ros-action-msgs
  ros-unique-identifier-msgs ros-service-msgs ros-type-description-interfaces ros-rosgraph-msgs
)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64)

# 1. The environment the versions and the generated messages come from.
bash "$ROOT/scripts/setup_env.sh"
PY="$VENV/bin/python"
mapfile -t PINNED < <("$PY" - "${RUNTIME[@]}" <<'EOF'
import importlib.metadata
import sys
for name in sys.argv[1:]:
    print(f'{name}=={importlib.metadata.version(name)}')
EOF
)
# The ros-jazzy-* pins of requirements.txt must be what .venv holds (they name the same packages).
while read -r pin; do
  name="${pin%%==*}"; name="${name%%\[*}"; want="${pin##*==}"
  have="$("$PY" -c "import importlib.metadata as m; print(m.version('$name'))")"
  [ "$have" = "$want" ] \
    || { log "$name: .venv has $have, requirements.txt pins $want (setup_env.sh)"; exit 1; }
done < <(grep -E '^ros-jazzy-[a-z-]+(\[[a-z]+\])?==' "$ROOT/requirements.txt")

# 2. Wheels for the GPU machine (manylinux x86_64, CPython 3.12), then slimmed.
exclude="$(git -C "$ROOT" rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.gpusoak/' "$exclude" 2>/dev/null || echo '/.gpusoak/' >> "$exclude"
download="$(mktemp -d)"
trap 'rm -rf "$download"' EXIT
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/wheels" "$BUNDLE/interfaces/pi0_ros/msg" "$BUNDLE/interfaces/lib"
log "downloading ${#PINNED[@]} wheels"
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp "${PLATFORMS[@]}" -d "$download" "${PINNED[@]}" \
  2>&1 | grep -v '^WARNING: Location' || true
count="$(find "$download" -name '*.whl' | wc -l)"
[ "$count" -eq "${#PINNED[@]}" ] || { log "expected ${#PINNED[@]} wheels, got $count"; exit 1; }
"$PY" "$ROOT/scripts/slim_wheels.py" "$download" "$BUNDLE/wheels" >&2

# 3. The generated interfaces: Python modules, typesupport extensions, C/C++ libraries.
cp "$ROOT"/pi0_ros/msg/*.py "$BUNDLE/interfaces/pi0_ros/msg/"
cp "$ROOT"/pi0_ros/pi0_ros_s__rosidl_typesupport_*.so "$BUNDLE/interfaces/pi0_ros/"
cp "$VENV"/lib/libpi0_ros__rosidl_*.so "$BUNDLE/interfaces/lib/"

# 4. Manifest: what is in it and which msg/ it matches (run_h200_soak.sh checks the checksum).
commit="$(git -C "$ROOT" rev-parse --short HEAD)"
{
  echo "pi0_ros GPU soak bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) at commit $commit"
  echo "msg-sha256 $(cat "$ROOT"/msg/*.msg | sha256sum | cut -d' ' -f1)"
  echo "wheels:"; (cd "$BUNDLE/wheels" && ls -1 ./*.whl | sed 's#^\./#  #')
  echo "interfaces:"; (cd "$BUNDLE/interfaces" && find . -type f | sort | sed 's#^\./#  #')
} > "$BUNDLE/MANIFEST.txt"
wheels="$(find "$BUNDLE/wheels" -name '*.whl' | wc -l)"
log "bundle ready: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1), $wheels wheels)"
