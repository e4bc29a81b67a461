# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Joint trajectory following with joint_trajectory_controller semantics (numpy only).

Times are seconds on one clock (the simulator's ROS clock). A trajectory's start time is its
header stamp, or the time it is received when the stamp is 0. Trajectory replacement: a new
trajectory takes over from `splice = max(start, now)`; until then the executing plan goes on,
at the splice the commanded state is the executing plan's state, and from there the new
trajectory's points later than the splice follow (points at or before it are dropped). Between
points: linear with positions only, cubic Hermite when velocities are given (accelerations are
accepted and ignored). After the last point its position is held; before any trajectory the
initial position is held. An invalid trajectory is rejected with `InvalidTrajectoryError` and
the executing one is kept.
"""
from dataclasses import dataclass
import math
from typing import Optional, Sequence, Tuple

import numpy as np


class InvalidTrajectoryError(ValueError):
    """A trajectory that the follower rejects (the reason is the message)."""


@dataclass(frozen=True)
class TrajectoryCommand:
    """A JointTrajectory as plain data; per-point lists may be ragged (they are validated)."""

    joint_names: Sequence[str]
    stamp: float  # start time in seconds; 0.0 means "start when received"
    time_from_start: Sequence[float]
    positions: Sequence[Sequence[float]]
    # One value per joint on every point, or empty on every point (a mix is rejected here,
    # where joint_trajectory_controller accepts it; this package's node always sends them).
    velocities: Sequence[Sequence[float]] = ()
    accelerations: Sequence[Sequence[float]] = ()


class TrajectoryFollower:
    """Samples the commanded joint state at any time; accepts or rejects new trajectories."""

    def __init__(self, joint_names: Sequence[str], initial_position: Sequence[float],
                 allow_nonzero_velocity_at_trajectory_end: bool = False):
        self.joint_names = tuple(joint_names)
        if len(set(self.joint_names)) != len(self.joint_names) or not self.joint_names:
            raise ValueError(f'joint names must be unique and not empty: {self.joint_names}')
        self.allow_nonzero_velocity_at_trajectory_end = allow_nonzero_velocity_at_trajectory_end
        self.accepted_count = 0
        self.rejected_count = 0
        self.hold(initial_position, 0.0)

    def hold(self, position: Sequence[float], now: float) -> None:
        """Drop any trajectory and hold `position` from `now` on."""
        position = np.asarray(position, dtype=float).reshape(-1)
        if position.shape != (len(self.joint_names),) or not np.all(np.isfinite(position)):
            raise ValueError(f'hold position must be {len(self.joint_names)} finite numbers')
        self._times = np.array([float(now)])
        self._positions = position[None, :].copy()
        self._velocities = np.zeros((1, len(self.joint_names)))
        # _cubic[i] says how the segment that ends at knot i is interpolated.
        self._cubic = np.array([False])

    @property
    def end_time(self) -> float:
        """Time of the last knot: from then on its position is held."""
        return float(self._times[-1])

    def set_trajectory(self, command: TrajectoryCommand, now: float) -> None:
        """Replace the executing trajectory from the new one's start; raise if invalid."""
        try:
            start, times, positions, velocities = self._validate(command, now)
        except InvalidTrajectoryError:
            self.rejected_count += 1
            raise
        splice = max(start, now)
        absolute = start + times
        later = absolute > splice
        at_splice = np.flatnonzero(absolute == splice)

        knot_times = [now]
        knot_positions = []
        knot_velocities = []
        knot_cubic = [False]
        position_now, velocity_now = self.sample(now)
        knot_positions.append(position_now)
        knot_velocities.append(velocity_now)
        if splice > now:
            # The executing plan goes on until the splice; its knots in between are kept.
            inside = (self._times > now) & (self._times < splice)
            for index in np.flatnonzero(inside):
                knot_times.append(float(self._times[index]))
                knot_positions.append(self._positions[index])
                knot_velocities.append(self._velocities[index])
                knot_cubic.append(bool(self._cubic[index]))
            position_splice, velocity_splice = self.sample(splice)
            knot_times.append(splice)
            knot_positions.append(position_splice)
            knot_velocities.append(velocity_splice)
            # The truncated segment keeps the interpolation of the one it was cut from; after
            # the executing plan's end its last position is held (whatever its end velocity).
            ending = int(np.searchsorted(self._times, splice))
            knot_cubic.append(ending < len(self._times) and bool(self._cubic[ending]))
        if at_splice.size:
            # A point exactly at the splice is commanded from then on (a step, as in JTC). At
            # a future splice it is a second knot at the same time, so the executing plan is
            # unchanged until then (sample() takes the later of two knots at one time).
            index = int(at_splice[0])
            point_velocity = (velocities[index] if velocities is not None
                              else np.zeros(len(self.joint_names)))
            if splice > now:
                knot_times.append(splice)
                knot_positions.append(positions[index])
                knot_velocities.append(point_velocity)
                knot_cubic.append(False)  # a zero-length segment, never interpolated
            else:
                knot_positions[-1] = positions[index]
                knot_velocities[-1] = point_velocity
        cubic = velocities is not None
        for index in np.flatnonzero(later):
            knot_times.append(float(absolute[index]))
            knot_positions.append(positions[index])
            knot_velocities.append(velocities[index] if cubic else None)
            knot_cubic.append(cubic)
        # Linear segments: the velocity at a knot is the slope of the segment that ends there.
        for index in range(len(knot_times)):
            if knot_velocities[index] is None:
                slope = ((knot_positions[index] - knot_positions[index - 1])
                         / (knot_times[index] - knot_times[index - 1]))
                knot_velocities[index] = slope
        self._times = np.array(knot_times, dtype=float)
        self._positions = np.array(knot_positions, dtype=float)
        self._velocities = np.array(knot_velocities, dtype=float)
        self._cubic = np.array(knot_cubic, dtype=bool)
        self.accepted_count += 1

    def sample(self, now: float) -> Tuple[np.ndarray, np.ndarray]:
        """Return the commanded (position, velocity) at time `now`."""
        times = self._times
        if now < times[0]:
            return self._positions[0].copy(), np.zeros(len(self.joint_names))
        if now == times[0]:  # a trajectory that replaced another at this very instant
            return self._positions[0].copy(), self._velocities[0].copy()
        if now >= times[-1]:
            return self._positions[-1].copy(), np.zeros(len(self.joint_names))
        end = int(np.searchsorted(times, now, side='right'))
        begin = end - 1
        duration = times[end] - times[begin]
        p0, p1 = self._positions[begin], self._positions[end]
        if not self._cubic[end]:
            fraction = (now - times[begin]) / duration
            return p0 + fraction * (p1 - p0), (p1 - p0) / duration
        v0, v1 = self._velocities[begin], self._velocities[end]
        s = (now - times[begin]) / duration
        h00 = 2 * s**3 - 3 * s**2 + 1
        h10 = s**3 - 2 * s**2 + s
        h01 = -2 * s**3 + 3 * s**2
        h11 = s**3 - s**2
        position = h00 * p0 + h10 * duration * v0 + h01 * p1 + h11 * duration * v1
        d00 = 6 * s**2 - 6 * s
        d10 = 3 * s**2 - 4 * s + 1
        d01 = -6 * s**2 + 6 * s
        d11 = 3 * s**2 - 2 * s
        velocity = (d00 * p0 + d01 * p1) / duration + d10 * v0 + d11 * v1
        return position, velocity

    def _validate(self, command: TrajectoryCommand, now: float):
        names = list(command.joint_names)
        if not names:
            raise InvalidTrajectoryError('empty joint names')
        if len(set(names)) != len(names):
            raise InvalidTrajectoryError(f'duplicate joint names: {names}')
        unknown = [name for name in names if name not in self.joint_names]
        if unknown:
            raise InvalidTrajectoryError(f'unknown joints: {unknown}')
        missing = [name for name in self.joint_names if name not in names]
        if missing:
            raise InvalidTrajectoryError(f'missing joints (partial goals not allowed): {missing}')
        count = len(command.time_from_start)
        if count == 0:
            raise InvalidTrajectoryError('empty trajectory (no points)')
        if len(command.positions) != count:
            raise InvalidTrajectoryError('positions and time_from_start differ in length')
        stamp = float(command.stamp)
        times = np.asarray(command.time_from_start, dtype=float)
        if not math.isfinite(stamp) or stamp < 0.0 or not np.all(np.isfinite(times)):
            raise InvalidTrajectoryError('non-finite or negative stamp or time_from_start')
        if times[0] < 0.0 or np.any(np.diff(times) <= 0.0):
            raise InvalidTrajectoryError(
                f'time_from_start must be >= 0 and strictly increasing: {times.tolist()}')
        order = [names.index(name) for name in self.joint_names]
        positions = self._per_point(command.positions, names, order, 'positions', required=True)
        velocities = self._per_point(command.velocities, names, order, 'velocities', count)
        self._per_point(command.accelerations, names, order, 'accelerations', count)
        if (velocities is not None and not self.allow_nonzero_velocity_at_trajectory_end
                and np.any(velocities[-1] != 0.0)):
            raise InvalidTrajectoryError('velocity of the last point is not zero')
        start = now if stamp == 0.0 else stamp
        if stamp != 0.0 and start + times[-1] < now:
            raise InvalidTrajectoryError(
                f'trajectory ends in the past ({start + times[-1]:.3f} < {now:.3f})')
        return start, times, positions, velocities

    @staticmethod
    def _per_point(values, names, order, what, count=None, required=False) -> Optional[np.ndarray]:
        rows = list(values)
        if not required and all(len(row) == 0 for row in rows):
            return None
        if count is not None and len(rows) != count:
            raise InvalidTrajectoryError(f'{what} given for {len(rows)} of {count} points')
        if any(len(row) != len(names) for row in rows):
            raise InvalidTrajectoryError(f'every point needs {len(names)} {what}')
        array = np.asarray(rows, dtype=float)
        if not np.all(np.isfinite(array)):
            raise InvalidTrajectoryError(f'non-finite {what}')
        return array[:, order]
