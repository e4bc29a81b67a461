# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""JointLimits, Chunk and validate_trajectory."""
import math

import numpy as np
import pytest

from pi0_ros.control import Chunk, JointLimits, PlannerConfig, validate_trajectory


def make_limits():
    return JointLimits([-1.0, -2.0], [1.0, 2.0], [1.0, 1.5], [5.0, 8.0])


def test_limits_clamp_exactly_at_the_bounds():
    limits = make_limits()
    assert limits.num_joints == 2
    np.testing.assert_array_equal(limits.clamp_position([1.5, -2.5]), [1.0, -2.0])
    np.testing.assert_array_equal(limits.clamp_position([0.25, -0.5]), [0.25, -0.5])
    batch = limits.clamp_position(np.array([[3.0, 3.0], [-3.0, -3.0]]))
    np.testing.assert_array_equal(batch, [[1.0, 2.0], [-1.0, -2.0]])


def test_limits_allow_infinite_position_bounds_for_continuous_joints():
    limits = JointLimits([-math.inf], [math.inf], [1.0], [1.0])
    np.testing.assert_array_equal(limits.clamp_position([1e9]), [1e9])


@pytest.mark.parametrize('arguments, message', [
    (([0.0], [0.0], [1.0], [1.0]), 'below'),
    (([1.0], [0.0], [1.0], [1.0]), 'below'),
    (([0.0], [1.0], [0.0], [1.0]), 'max_velocity'),
    (([0.0], [1.0], [1.0], [-1.0]), 'max_acceleration'),
    (([0.0], [1.0], [math.inf], [1.0]), 'max_velocity'),
    (([0.0, 0.0], [1.0], [1.0], [1.0]), 'differ in length'),
    (([], [], [], []), 'non-empty'),
    (([math.nan], [1.0], [1.0], [1.0]), 'NaN'),
    (([0.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], ['only_one']), '1 joint names for 2'),
])
def test_limits_reject_bad_values(arguments, message):
    with pytest.raises(ValueError, match=message):
        JointLimits(*arguments)


def test_chunk_time_base_and_interpolation():
    chunk = Chunk(t0=10.0, dt=0.5, actions=[[0.0, 1.0], [1.0, 3.0], [3.0, 3.0]], sequence=7)
    assert chunk.horizon == 3 and chunk.num_joints == 2 and chunk.sequence == 7
    assert chunk.end_time == 11.0
    assert chunk.action_time(2) == 11.0
    np.testing.assert_array_equal(chunk.sample(10.0), [0.0, 1.0])       # exact action
    np.testing.assert_array_equal(chunk.sample(10.25), [0.5, 2.0])      # between
    np.testing.assert_array_equal(chunk.sample(10.75), [2.0, 3.0])
    np.testing.assert_array_equal(chunk.sample(9.0), [0.0, 1.0])        # before: first action
    np.testing.assert_array_equal(chunk.sample(12.0), [3.0, 3.0])       # after: last action
    np.testing.assert_array_equal(chunk.sample_many(np.array([10.5, 11.0])),
                                  [[1.0, 3.0], [3.0, 3.0]])


def test_chunk_of_one_action_is_constant_and_actions_are_read_only():
    chunk = Chunk(0.0, 0.1, np.array([[2.0, -1.0]]))
    assert chunk.end_time == 0.0
    np.testing.assert_array_equal(chunk.sample(5.0), [2.0, -1.0])
    with pytest.raises(ValueError):
        chunk.actions[0, 0] = 1.0


@pytest.mark.parametrize('actions', [np.zeros(3), np.zeros((0, 2)), np.zeros((2, 0)),
                                     np.zeros((2, 2, 2))])
def test_chunk_rejects_bad_shapes(actions):
    with pytest.raises(ValueError, match=r'\[H, J\]'):
        Chunk(0.0, 0.1, actions)


@pytest.mark.parametrize('kwargs, field', [
    ({'points_per_message': 1}, 'points_per_message'),
    ({'points_per_message': 2.0}, 'points_per_message'),
    ({'point_spacing': 0.0}, 'point_spacing'),
    ({'control_period': math.nan}, 'control_period'),
    ({'points_per_message': 2, 'point_spacing': 0.01}, 'two control periods'),
    ({'blend_duration': -0.1}, 'blend_duration'),
    ({'ensembling_decay': math.inf}, 'ensembling_decay'),
    ({'temporal_ensembling': 1}, 'temporal_ensembling'),
])
def test_planner_config_names_the_bad_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PlannerConfig(**kwargs)


def test_planner_config_defaults():
    config = PlannerConfig()
    assert config.lookahead_duration == pytest.approx(0.2)
    assert not config.temporal_ensembling


def test_validate_trajectory_accepts_a_valid_one():
    times = [0.1, 0.2, 0.3]
    positions = np.zeros((3, 2))
    velocities = np.array([[0.1, 0.0], [0.1, 0.0], [0.0, 0.0]])
    assert validate_trajectory(times, positions, velocities, num_joints=2) == []
    assert validate_trajectory(times, positions.tolist()) == []


@pytest.mark.parametrize('times, positions, velocities, num_joints, expected', [
    ([], [], None, None, 'no points'),
    ([0.0, 0.1], [[0.0], [0.0]], None, None, 'not positive'),
    ([0.1, 0.1], [[0.0], [0.0]], None, None, 'not strictly increasing at point 1'),
    ([0.2, 0.1], [[0.0], [0.0]], None, None, 'not strictly increasing'),
    ([0.1, math.nan], [[0.0], [0.0]], None, None, 'times_from_start is not finite'),
    ([0.1, 0.2], [[0.0]], None, None, 'positions has 1 points'),
    ([0.1, 0.2], [[0.0, 1.0], [0.0]], None, None, 'positions[1] has 1 values, expected 2'),
    ([0.1, 0.2], [[0.0], [math.inf]], None, None, 'positions[1] is not finite'),
    ([0.1, 0.2], [[0.0], [0.0]], None, 2, 'positions[0] has 1 values, expected 2'),
    ([0.1, 0.2], [[0.0], [0.0]], [[0.0], [0.5]], None, 'last point velocity must be zero'),
    ([0.1, 0.2], [[0.0], [0.0]], [[math.nan], [0.0]], None, 'velocities[0] is not finite'),
    ([0.1, 0.2], [[0.0], [0.0]], [[0.0]], None, 'velocities has 1 points'),
])
def test_validate_trajectory_reports_each_rule(times, positions, velocities, num_joints,
                                               expected):
    problems = validate_trajectory(times, positions, velocities, num_joints)
    assert any(expected in problem for problem in problems), problems
    # As float arrays (the planner's), where the case has that shape: the same report.
    try:
        arrays = [np.array(times, dtype=float), np.array(positions, dtype=float),
                  None if velocities is None else np.array(velocities, dtype=float)]
    except ValueError:
        return  # ragged
    assert validate_trajectory(*arrays, num_joints) == problems


def test_validate_trajectory_takes_planner_arrays_of_any_joint_count():
    times = np.array([0.02, 0.04, 0.06])
    positions = np.full((3, 6), 0.5)
    velocities = np.vstack([np.full((2, 6), 0.1), np.zeros((1, 6))])
    assert validate_trajectory(times, positions, velocities, 6) == []
    assert validate_trajectory(times, positions, velocities) == []
    assert validate_trajectory(times, positions, -0.0 * velocities) == []
    assert validate_trajectory(times, positions, velocities, 5) != []
    assert validate_trajectory(times, positions[:, :5], velocities, 6) != []
    assert validate_trajectory(times[::-1], positions, velocities) != []
    assert validate_trajectory(np.array(0.02), positions[:1], velocities[-1:]) != []
