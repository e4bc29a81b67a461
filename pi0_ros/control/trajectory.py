# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Checks a trajectory against the rules of ros2_control's joint_trajectory_controller."""
import math

import numpy as np


def _rows(name, values, num_points, num_joints, problems):
    """Return the rows of a per-point array as lists of floats; append problems found."""
    try:
        rows = [list(map(float, row)) for row in values]
    except (TypeError, ValueError):
        problems.append(f'{name} must be a sequence of per-point sequences of numbers')
        return None
    if len(rows) != num_points:
        problems.append(f'{name} has {len(rows)} points, times_from_start has {num_points}')
    for index, row in enumerate(rows):
        if len(row) != num_joints:
            problems.append(f'{name}[{index}] has {len(row)} values, expected {num_joints}')
        elif not all(math.isfinite(value) for value in row):
            problems.append(f'{name}[{index}] is not finite')
    return rows


def _valid_arrays(times, positions, velocities, num_joints):
    """Return True if float arrays of the right shapes pass every rule (False: not known)."""
    arrays = (times, positions) + (() if velocities is None else (velocities,))
    if not all(isinstance(a, np.ndarray) and a.dtype.kind == 'f' for a in arrays) \
            or times.ndim != 1:
        return False
    count = len(times)
    joints = positions.shape[1] if num_joints is None and positions.ndim == 2 else num_joints
    shape = (count, joints)
    return bool(count > 0 and positions.shape == shape
                and (velocities is None or velocities.shape == shape)
                and np.isfinite(times).all() and times[0] > 0.0
                and (count == 1 or (np.diff(times) > 0.0).all())
                and np.isfinite(positions).all()
                and (velocities is None or (np.isfinite(velocities).all()
                                            and not velocities[-1].any())))


def validate_trajectory(times_from_start, positions, velocities=None, num_joints=None):
    """
    Return the list of JTC rule violations of a trajectory; [] when it is valid.

    Rules: at least one point; times_from_start finite, positive and strictly increasing; every
    point has num_joints finite positions (num_joints defaults to the first point's length) and,
    when velocities are given, as many finite velocities; the last velocity is zero (JTC rejects a
    trajectory that ends moving when velocities are sent).

    The planner's float arrays take a vectorized check (every control tick runs it); anything
    else, or a trajectory that fails it, the element-wise one, which names each problem.
    """
    if _valid_arrays(times_from_start, positions, velocities, num_joints):
        return []
    problems = []
    try:
        times = [float(t) for t in times_from_start]
    except (TypeError, ValueError):
        return ['times_from_start must be a sequence of numbers']
    if not times:
        return ['trajectory has no points']
    if not all(math.isfinite(t) for t in times):
        problems.append('times_from_start is not finite')
    elif times[0] <= 0.0:
        problems.append(f'times_from_start[0] = {times[0]} is not positive')
    for index in range(1, len(times)):
        if not times[index] > times[index - 1]:
            problems.append(f'times_from_start is not strictly increasing at point {index} '
                            f'({times[index - 1]} then {times[index]})')
            break
    if num_joints is None:
        try:
            num_joints = len(positions[0])
        except (TypeError, IndexError, KeyError):
            return problems + ['positions must be a sequence of per-point sequences']
    _rows('positions', positions, len(times), num_joints, problems)
    if velocities is not None:
        rows = _rows('velocities', velocities, len(times), num_joints, problems)
        if rows and any(value != 0.0 for value in rows[-1]):
            problems.append(f'last point velocity must be zero, got {rows[-1]}')
    return problems
