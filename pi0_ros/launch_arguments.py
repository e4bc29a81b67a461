# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The launch files' parameter overrides (plain Python, so they are tested without launch_ros).

A launch argument such as `checkpoint:=...` overrides the node's parameter only when it is
given: launch_ros passes a parameter dict after the params file, so a default value there
would silently replace what the user's params file says (a checkpoint among them).
"""
import os

from pi0_ros.parameters import validate_value

# Launch arguments that set a node parameter when given (empty: the params file's value).
OVERRIDES = {'checkpoint': str, 'device': str, 'precision': str, 'use_sim_time': bool}
UNSET_HELP = 'empty: the params_file value'


def parameter_overrides(given: dict) -> dict:
    """
    Return the node parameters set by launch arguments: the non-empty ones, typed.

    given maps argument names of OVERRIDES to their launch values (strings). use_sim_time
    reads true/false (any case); a bad value raises ValueError naming the argument.
    """
    overrides = {}
    for name, kind in OVERRIDES.items():
        text = str(given.get(name, '')).strip()
        if not text:
            continue
        if kind is bool:
            if text.lower() not in ('true', 'false'):
                raise ValueError(f"launch argument {name}:='{text}' must be true or false")
            overrides[name] = text.lower() == 'true'
        else:
            validate_value(name, text)  # a clear error at launch, naming the argument
            # launch_ros writes the dict to a YAML file unquoted: a relative checkpoint named
            # y, n, 1e5 or nan would arrive as a bool or a number. Absolute, it stays a string
            # (the node resolves a relative path against the same working directory).
            overrides[name] = os.path.abspath(text) if name == 'checkpoint' else text
    return overrides


# The simulated cameras by where inference runs. On a CPU, rendering and sending the frames take
# the cores that inference needs: on 2 cores with one core kept busy by another process the node
# followed 94 % of the time at 320x240, 10 Hz, 85-88 % at 640x480, 15 Hz (benchmarks/RESULTS.md,
# feeder-load-cpu). A GPU node takes them at full size.
SIM_CAMERAS_CPU = {'image_width': 320, 'image_height': 240, 'camera_rate': 10.0}
SIM_CAMERAS_GPU = {'image_width': 640, 'image_height': 480, 'camera_rate': 15.0}


def runs_on_gpu(device: str) -> bool:
    """Return whether the node's `device` (auto, cpu, cuda, cuda:N; empty = auto) is a GPU."""
    device = device.strip() or 'auto'
    if device != 'auto':
        return device.startswith('cuda')
    import torch
    return torch.cuda.is_available()


def sim_camera_settings(device: str, given: dict) -> dict:
    """Return the simulator's image_width, image_height, camera_rate: given, else by device."""
    defaults = SIM_CAMERAS_GPU if runs_on_gpu(device) else SIM_CAMERAS_CPU
    settings = {}
    for name, default in defaults.items():
        text = str(given.get(name, '')).strip()
        try:
            settings[name] = type(default)(text) if text else default
        except ValueError:
            raise ValueError(f"launch argument {name}:='{text}' must be a number") from None
        if not settings[name] > 0:
            raise ValueError(f"launch argument {name}:='{text}' must be positive")
    return settings


def parse_robots(text: str) -> list:
    """Return the robot names of fleet.launch.py's `robots:=arm1,arm2` (distinct, non-empty)."""
    robots = [name.strip().strip('/') for name in str(text).split(',') if name.strip()]
    if not robots or len(set(robots)) != len(robots):
        raise ValueError(f"launch argument robots:='{text}' must name one or more distinct "
                         'robots, separated by commas')
    return robots


# The fleet process's own node (batch_wait, max_batch, ...): config/fleet.yaml's `/**/pi0_fleet`.
FLEET_NODE_NAME = 'pi0_fleet'


def parse_processes(text: str, robots: list) -> int:
    """Return fleet.launch.py's `processes:=N` (1 or more, at most one per robot)."""
    try:
        count = int(str(text).strip())
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"launch argument processes:='{text}' must be a whole number >= 1")
    return min(count, len(robots))


def split_robots(robots: list, processes: int) -> list:
    """Split the robots into `processes` contiguous groups whose sizes differ by one at most."""
    count = min(processes, len(robots))
    size, extra = divmod(len(robots), count)
    bounds = [index * size + min(index, extra) for index in range(count + 1)]
    return [robots[bounds[index]:bounds[index + 1]] for index in range(count)]


def fleet_process_remaps(index: int, processes: int) -> list:
    """
    Return the remaps of fleet process `index` (0-based) of `processes`: [(from, to)].

    Several processes put their fleet nodes in namespaces of their own (/fleet1, /fleet2, ...)
    so that their names and parameter services stay distinct; the rule names the fleet node
    only (a plain __ns or __node rule would move every robot's node of the process too).
    """
    if processes == 1:
        return []
    return [(f'{FLEET_NODE_NAME}:__ns', f'/fleet{index + 1}')]
