# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""TrajectoryFollower: joint_trajectory_controller semantics with exact expectations."""
import math

import numpy as np
import pytest

from pi0_ros.control.follower import InvalidTrajectoryError, TrajectoryCommand, TrajectoryFollower

NAMES = ('a', 'b')


def follower(position=(0.0, 0.0), **kwargs):
    return TrajectoryFollower(NAMES, position, **kwargs)


def command(times, positions, stamp=0.0, velocities=(), names=NAMES, accelerations=()):
    return TrajectoryCommand(joint_names=names, stamp=stamp, time_from_start=times,
                             positions=positions, velocities=velocities,
                             accelerations=accelerations)


def sample(f, now):
    position, velocity = f.sample(now)
    return position.tolist(), velocity.tolist()


def test_holds_initial_position_before_any_trajectory():
    f = follower((0.5, -0.25))
    assert sample(f, 0.0) == ([0.5, -0.25], [0.0, 0.0])
    assert sample(f, 123.0) == ([0.5, -0.25], [0.0, 0.0])


def test_stamp_zero_starts_now_with_linear_interpolation_and_holds_the_end():
    f = follower()
    f.set_trajectory(command([1.0, 2.0], [[1.0, 2.0], [3.0, 2.0]]), now=10.0)
    assert sample(f, 10.0) == ([0.0, 0.0], [0.0, 0.0])
    assert sample(f, 10.5) == ([0.5, 1.0], [1.0, 2.0])
    assert sample(f, 11.0) == ([1.0, 2.0], [2.0, 0.0])  # second segment starts at its knot
    assert sample(f, 11.25) == ([1.5, 2.0], [2.0, 0.0])
    assert sample(f, 12.0) == ([3.0, 2.0], [0.0, 0.0])
    assert sample(f, 99.0) == ([3.0, 2.0], [0.0, 0.0])


def test_joint_names_in_any_order_are_mapped_by_name():
    f = follower()
    f.set_trajectory(command([1.0], [[7.0, 3.0]], names=('b', 'a')), now=0.0)
    assert sample(f, 1.0)[0] == [3.0, 7.0]


def test_cubic_hermite_with_velocities_matches_endpoints_and_midpoint():
    f = follower()
    f.set_trajectory(command([2.0], [[1.0, -1.0]], velocities=[[0.0, 0.0]]), now=0.0)
    # From (0, v=0) to (1, v=0) over 2 s: smoothstep; midpoint exact, velocity 1.5 * 1 / 2.
    position, velocity = f.sample(1.0)
    np.testing.assert_allclose(position, [0.5, -0.5], rtol=0, atol=1e-12)
    np.testing.assert_allclose(velocity, [0.75, -0.75], rtol=0, atol=1e-12)
    position, velocity = f.sample(0.5)
    np.testing.assert_allclose(position, [0.15625, -0.15625], rtol=0, atol=1e-12)
    assert sample(f, 2.0) == ([1.0, -1.0], [0.0, 0.0])


def test_cubic_through_a_moving_waypoint_is_velocity_continuous():
    f = follower()
    f.set_trajectory(command([1.0, 2.0], [[1.0, 0.0], [2.0, 0.0]],
                             velocities=[[1.5, 0.0], [0.0, 0.0]]), now=0.0)
    before = f.sample(1.0 - 1e-9)[1]
    after = f.sample(1.0 + 1e-9)[1]
    np.testing.assert_allclose(before, [1.5, 0.0], atol=1e-6)
    np.testing.assert_allclose(after, [1.5, 0.0], atol=1e-6)
    np.testing.assert_allclose(f.sample(1.0)[0], [1.0, 0.0], atol=1e-12)


def test_a_trajectory_replaced_at_the_instant_it_arrived_keeps_its_velocity():
    # Two commands with one receive time (two callbacks at one sim-clock tick): the second
    # starts from the first one's state at that instant, velocity included.
    f = follower()
    f.set_trajectory(command([1.0], [[1.0, 0.0]], velocities=[[0.0, 0.0]]), now=0.0)
    position, velocity = f.sample(0.5)
    f.set_trajectory(command([1.0], [[1.0, 0.0]], velocities=[[0.0, 0.0]]), now=0.5)
    f.set_trajectory(command([1.0], [[1.0, 0.0]], velocities=[[0.0, 0.0]]), now=0.5)
    np.testing.assert_allclose(f.sample(0.5)[1], velocity, rtol=0, atol=1e-12)
    np.testing.assert_allclose(f.sample(0.5)[0], position, rtol=0, atol=1e-12)
    assert velocity[0] > 1.0


def test_future_stamp_waits_then_moves_from_the_held_position():
    f = follower((1.0, 1.0))
    f.set_trajectory(command([1.0], [[3.0, 1.0]], stamp=5.0), now=2.0)
    assert sample(f, 2.0) == ([1.0, 1.0], [0.0, 0.0])
    assert sample(f, 4.9) == ([1.0, 1.0], [0.0, 0.0])
    # At a knot the velocity is that of the segment that starts there.
    assert sample(f, 5.0) == ([1.0, 1.0], [2.0, 0.0])
    assert sample(f, 5.5) == ([2.0, 1.0], [2.0, 0.0])
    assert sample(f, 6.0) == ([3.0, 1.0], [0.0, 0.0])


def test_new_trajectory_replaces_the_executing_one_from_its_start_time():
    f = follower()
    f.set_trajectory(command([4.0], [[4.0, 0.0]]), now=0.0)  # 1 rad/s on joint a
    f.set_trajectory(command([1.0], [[0.0, 0.0]], stamp=2.0), now=1.0)
    # The old trajectory goes on until t = 2 (a = 2), then the new one goes back to 0 in 1 s.
    assert sample(f, 1.5) == ([1.5, 0.0], [1.0, 0.0])
    assert sample(f, 1.999) == ([1.999, 0.0], [1.0, 0.0])
    assert sample(f, 2.0) == ([2.0, 0.0], [-2.0, 0.0])
    assert sample(f, 2.5) == ([1.0, 0.0], [-2.0, 0.0])
    assert sample(f, 3.0) == ([0.0, 0.0], [0.0, 0.0])
    assert sample(f, 4.0) == ([0.0, 0.0], [0.0, 0.0])


def test_points_already_past_are_dropped_and_motion_starts_at_the_current_command():
    f = follower()
    # Stamped 1 s ago: the point at +0.5 s is past; the one at +2 s is 1 s ahead.
    f.set_trajectory(command([0.5, 2.0], [[9.0, 9.0], [2.0, 4.0]], stamp=9.0), now=10.0)
    assert sample(f, 10.0) == ([0.0, 0.0], [0.0, 0.0])
    assert sample(f, 10.5) == ([1.0, 2.0], [2.0, 4.0])
    assert sample(f, 11.0) == ([2.0, 4.0], [0.0, 0.0])


def test_single_point_at_time_zero_is_commanded_at_once():
    f = follower()
    f.set_trajectory(command([0.0], [[0.25, 0.5]]), now=3.0)
    assert sample(f, 3.0) == ([0.25, 0.5], [0.0, 0.0])
    assert sample(f, 4.0) == ([0.25, 0.5], [0.0, 0.0])


def test_hold_drops_the_trajectory():
    f = follower()
    f.set_trajectory(command([1.0], [[1.0, 1.0]]), now=0.0)
    f.hold([0.5, 0.5], now=0.2)
    assert sample(f, 0.6) == ([0.5, 0.5], [0.0, 0.0])


@pytest.mark.parametrize('bad, reason', [
    (command([1.0, 1.0], [[1.0, 1.0], [2.0, 2.0]]), 'strictly increasing'),
    (command([2.0, 1.0], [[1.0, 1.0], [2.0, 2.0]]), 'strictly increasing'),
    (command([-1.0], [[1.0, 1.0]]), 'strictly increasing'),
    (command([1.0], [[1.0]]), 'every point needs 2 positions'),
    (command([1.0, 2.0], [[1.0, 1.0]]), 'differ in length'),
    (command([], []), 'empty trajectory'),
    (command([1.0], [[math.nan, 1.0]]), 'non-finite positions'),
    (command([math.inf], [[1.0, 1.0]]), 'non-finite'),
    (command([1.0], [[1.0, 1.0]], velocities=[[math.inf, 0.0]]), 'non-finite velocities'),
    (command([1.0], [[1.0, 1.0]], velocities=[[0.0]]), 'every point needs 2 velocities'),
    (command([1.0], [[1.0, 1.0]], accelerations=[[0.0]]), 'every point needs 2 accelerations'),
    (command([1.0], [[1.0, 1.0]], velocities=[[0.5, 0.0]]), 'last point is not zero'),
    (command([1.0], [[1.0, 1.0, 1.0]], names=('a', 'b', 'c')), 'unknown joints'),
    (command([1.0], [[1.0]], names=('a',)), 'missing joints'),
    (command([1.0], [[1.0, 1.0]], names=('a', 'a')), 'duplicate joint names'),
    (command([1.0], [[1.0, 1.0]], names=()), 'empty joint names'),
    (command([1.0], [[1.0, 1.0]], stamp=5.0), 'ends in the past'),
])
def test_invalid_trajectories_are_rejected_and_the_executing_one_is_kept(bad, reason):
    f = follower()
    f.set_trajectory(command([4.0], [[4.0, 0.0]]), now=0.0)
    with pytest.raises(InvalidTrajectoryError, match=reason):
        f.set_trajectory(bad, now=10.0 if 'past' in reason else 1.0)
    assert (f.accepted_count, f.rejected_count) == (1, 1)
    assert sample(f, 2.0) == ([2.0, 0.0], [1.0, 0.0])


def test_nonzero_end_velocity_accepted_when_allowed():
    f = follower(allow_nonzero_velocity_at_trajectory_end=True)
    f.set_trajectory(command([1.0], [[1.0, 1.0]], velocities=[[0.5, 0.0]]), now=0.0)
    assert sample(f, 1.0) == ([1.0, 1.0], [0.0, 0.0])  # holds the last point after the end


def test_a_point_at_a_future_start_changes_nothing_before_it():
    # The executing plan goes on until the new one's stamp; its first point, at the stamp, is
    # a step there (a point 1 ns later gives the same motion before the stamp).
    for first in (0.0, 1e-9):
        f = follower()
        f.set_trajectory(command([4.0], [[4.0, 0.0]]), now=0.0)          # 1 rad/s
        f.set_trajectory(command([first, first + 1.0], [[0.0, 0.0], [0.0, 0.0]], stamp=2.0),
                         now=1.0)
        for t in (1.5, 1.999):
            position, velocity = f.sample(t)
            np.testing.assert_allclose(position, [t, 0.0], rtol=0, atol=1e-9)
            np.testing.assert_allclose(velocity, [1.0, 0.0], rtol=0, atol=1e-9)
        np.testing.assert_allclose(f.sample(2.0 + first)[0], [0.0, 0.0], atol=1e-9)


def test_a_held_end_with_nonzero_velocity_stays_held_until_a_future_start():
    f = follower(allow_nonzero_velocity_at_trajectory_end=True)
    f.set_trajectory(command([1.0], [[1.0, 0.0]], velocities=[[1.0, 0.0]]), now=0.0)
    f.set_trajectory(command([1.0], [[0.0, 0.0]], velocities=[[0.0, 0.0]], stamp=3.0), now=0.5)
    for t in (1.0, 1.5, 2.0, 2.5, 3.0):
        assert f.sample(t)[0][0] == 1.0, t                              # no overshoot
