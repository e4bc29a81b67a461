# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The scripted expert of the touch task: inverse kinematics, then a jerk-limited joint path.

ToolIK solves for the arm joints that put the tool point (between the jaw tips) at a position,
the gripper pointing down, with damped least squares on MuJoCo's site Jacobian (a private
MjData: the simulation is not touched). plan_touch goes from the arm's position to above the
named object, then down onto its top, each segment a minimum-jerk (quintic) profile whose
duration keeps every joint within a fraction of its velocity and acceleration limits. The
result, sampled with positions, velocities and accelerations, is what the expert publishes as
one JointTrajectory: the recorded actions are then what a policy must produce.
"""
from dataclasses import dataclass
import math

import mujoco
import numpy as np

from pi0_ros.sim.scene import JOINT_NAMES, SO101_JOINT_LIMITS, TOOL_SITE

ARM_JOINTS = JOINT_NAMES[:4]  # pan, lift, elbow, wrist flex: the joints the IK moves
ABOVE = 0.07  # height of the approach point over the object's top, m
TOUCH_CLEARANCE = 0.004  # the tool point stops this far above the object's top, m
LIMIT_FRACTION = 0.5  # of each joint's velocity and acceleration limits
MIN_SEGMENT_S = 0.4
PAUSE_S = 0.15  # still above the object before going down
SAMPLE_PERIOD = 0.02  # between the published trajectory points, s

# Minimum-jerk profile s(u) = 10u^3 - 15u^4 + 6u^5: peak ds/du and |d2s/du2|.
_PEAK_VELOCITY = 1.875
_PEAK_ACCELERATION = 10.0 / math.sqrt(3.0)


class IKError(RuntimeError):
    """The IK found no joint positions close enough to the wanted tool position."""


@dataclass(frozen=True)
class JointPath:
    """Samples of a joint path: times (s from its start) and per-joint arrays [n, joints]."""

    times: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray
    accelerations: np.ndarray

    @property
    def duration(self) -> float:
        """Return the time of the last sample."""
        return float(self.times[-1])


class ToolIK:
    """Damped-least-squares IK of the tool point with the gripper pointing down."""

    def __init__(self, model: mujoco.MjModel, tolerance: float = 2e-3):
        self.model = model
        self.data = mujoco.MjData(model)
        self.tolerance = tolerance
        self._site = int(model.site(TOOL_SITE).id)
        self._qpos = np.array([model.joint(n).qposadr[0] for n in JOINT_NAMES], dtype=int)
        self._dofs = np.array([model.joint(n).dofadr[0] for n in ARM_JOINTS], dtype=int)
        limits = SO101_JOINT_LIMITS
        self._lower = np.array(limits.position_lower[:len(ARM_JOINTS)])
        self._upper = np.array(limits.position_upper[:len(ARM_JOINTS)])

    def tool_position(self, joints) -> np.ndarray:
        """Return the tool point for the six joint positions `joints`."""
        self._set(joints)
        return self.data.site_xpos[self._site].copy()

    def solve(self, target, seed_joints) -> np.ndarray:
        """
        Return six joint positions reaching `target` from `seed_joints`; raise IKError.

        Where the gripper cannot point down there, the pointing counts less and less (the
        position always has to be reached).
        """
        for weight in (0.3, 0.1, 0.03, 0.0):
            joints, missed = self._solve(np.asarray(target, dtype=float), seed_joints, weight)
            if missed <= 2 * self.tolerance:
                return joints
        raise IKError(f'IK missed {np.round(target, 3).tolist()} by {missed * 1000:.1f} mm')

    def _solve(self, target, seed_joints, weight, iterations=200):
        radial = target[:2] / max(np.linalg.norm(target[:2]), 1e-6)
        # Down, tilted a little outwards: reachable over the whole placement area.
        approach = np.array([0.3 * radial[0], 0.3 * radial[1], -1.0])
        approach /= np.linalg.norm(approach)
        joints = np.array(seed_joints, dtype=float)
        jacobian_position = np.zeros((3, self.model.nv))
        jacobian_rotation = np.zeros((3, self.model.nv))
        damping = 0.05
        for _ in range(iterations):
            self._set(joints)
            position_error = target - self.data.site_xpos[self._site]
            axis = self.data.site_xmat[self._site].reshape(3, 3)[:, 0]  # along the jaws
            rotation_error = np.cross(axis, approach)
            if np.linalg.norm(position_error) < self.tolerance and (
                    weight == 0.0 or np.linalg.norm(rotation_error) < 0.05):
                break
            mujoco.mj_jacSite(self.model, self.data, jacobian_position, jacobian_rotation,
                              self._site)
            jac = np.vstack([jacobian_position[:, self._dofs],
                             weight * jacobian_rotation[:, self._dofs]])
            error = np.concatenate([position_error, weight * rotation_error])
            step = jac.T @ np.linalg.solve(jac @ jac.T + damping**2 * np.eye(6), error)
            joints[:len(ARM_JOINTS)] = np.clip(joints[:len(ARM_JOINTS)] + step,
                                               self._lower, self._upper)
        return joints, float(np.linalg.norm(target - self.tool_position(joints)))

    def _set(self, joints):
        self.data.qpos[self._qpos] = joints
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)


def minimum_jerk_duration(start, end, fraction: float = LIMIT_FRACTION) -> float:
    """Return the shortest minimum-jerk duration keeping every joint within its limits."""
    distance = np.abs(np.asarray(end, dtype=float) - np.asarray(start, dtype=float))
    velocity = fraction * np.asarray(SO101_JOINT_LIMITS.max_velocity)
    acceleration = fraction * np.asarray(SO101_JOINT_LIMITS.max_acceleration)
    needed = np.maximum(_PEAK_VELOCITY * distance / velocity,
                        np.sqrt(_PEAK_ACCELERATION * distance / acceleration))
    return max(float(needed.max()), MIN_SEGMENT_S)


def joint_path(waypoints, durations, sample_period: float = SAMPLE_PERIOD) -> JointPath:
    """Join minimum-jerk segments (at rest at every waypoint), sampled every sample_period."""
    waypoints = np.asarray(waypoints, dtype=float)
    starts = np.concatenate([[0.0], np.cumsum(durations)])
    count = int(math.floor(starts[-1] / sample_period + 1e-9)) + 1
    times = np.arange(count) * sample_period
    if times[-1] < starts[-1]:
        times = np.append(times, starts[-1])
    positions = np.empty((len(times), waypoints.shape[1]))
    velocities = np.empty_like(positions)
    accelerations = np.empty_like(positions)
    for row, now in enumerate(times):
        segment = min(int(np.searchsorted(starts, now, side='right')) - 1, len(durations) - 1)
        duration = durations[segment]
        u = (now - starts[segment]) / duration if duration > 0 else 1.0
        u = min(max(u, 0.0), 1.0)
        s = 10 * u**3 - 15 * u**4 + 6 * u**5
        ds = (30 * u**2 - 60 * u**3 + 30 * u**4) / duration if duration > 0 else 0.0
        dds = (60 * u - 180 * u**2 + 120 * u**3) / duration**2 if duration > 0 else 0.0
        delta = waypoints[segment + 1] - waypoints[segment]
        positions[row] = waypoints[segment] + s * delta
        velocities[row] = ds * delta
        accelerations[row] = dds * delta
    velocities[-1] = 0.0  # at rest at the end (JTC's rule for a last point)
    accelerations[-1] = 0.0
    return JointPath(times, positions, velocities, accelerations)


def plan_touch(ik: ToolIK, start_joints, object_centre, half_height: float) -> JointPath:
    """Return the expert's path from `start_joints` to touching the object's top."""
    start = np.asarray(start_joints, dtype=float)
    top = np.asarray(object_centre, dtype=float) + [0.0, 0.0, half_height]
    above = ik.solve(top + [0.0, 0.0, ABOVE], start)
    touch = ik.solve(top + [0.0, 0.0, TOUCH_CLEARANCE], above)
    waypoints = [start, above, above, touch]
    durations = [minimum_jerk_duration(start, above), PAUSE_S,
                 minimum_jerk_duration(above, touch)]
    return joint_path(waypoints, durations)


def path_command(path: JointPath, stamp: float):
    """Return `path` as a follower TrajectoryCommand starting at `stamp` (s)."""
    from pi0_ros.control.follower import TrajectoryCommand
    return TrajectoryCommand(
        joint_names=JOINT_NAMES, stamp=stamp, time_from_start=path.times.tolist(),
        positions=path.positions.tolist(), velocities=path.velocities.tolist(),
        accelerations=path.accelerations.tolist())
