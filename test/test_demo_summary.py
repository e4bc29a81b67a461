# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The demo report's numbers from a recorded run (no ROS: a recorder filled by hand)."""
from types import SimpleNamespace

import numpy as np

from pi0_ros.demo import summarize
from pi0_ros.sim.scene import joint_limits

LIMITS = joint_limits()
JOINTS = len(LIMITS.position_lower)


def recorded(points_by_time, latencies=(), to_command=()):
    """Return a recorder with one command per (time, positions [P, J], velocities [P, J])."""
    return SimpleNamespace(
        command_times=[t for t, _, _ in points_by_time],
        commands=[(t, q[0]) for t, q, _ in points_by_time],
        command_points=list(points_by_time),
        measured=[(t, q[0]) for t, q, _ in points_by_time],
        latencies_ms=list(latencies), observation_to_command_ms=list(to_command),
        statuses=[], non_finite_commands=0)


def test_every_point_and_velocity_of_a_command_is_checked_against_the_limits():
    inside = np.zeros((10, JOINTS))
    beyond = inside.copy()
    beyond[1, 0] = LIMITS.position_upper[0] + 1.0          # the second point, not the first
    fast = inside.copy()
    fast[3, 2] = LIMITS.max_velocity[2] * 2.0
    recorder = recorded([(1.0, inside, inside), (1.02, beyond, inside), (1.04, inside, fast),
                         (1.06, inside, inside)])
    assert summarize(recorder, LIMITS, 50.0, (0.0, 2.0))['commands_out_of_limits'] == 2


def test_latencies_are_taken_from_the_measured_window_only():
    still = np.zeros((10, JOINTS))
    recorder = recorded([(10.0, still, still), (10.02, still, still)],
                        latencies=[(5.0, 900.0), (10.01, 30.0), (10.03, 40.0)],
                        to_command=[(5.0, 1500.0), (10.01, 60.0)])
    summary = summarize(recorder, LIMITS, 50.0, (10.0, 11.0))
    assert summary['inference_latency_ms']['count'] == 2         # the start-up one left out
    assert summary['inference_latency_ms']['p99'] < 41.0
    assert summary['observation_to_first_command_ms']['p99'] == 60.0
