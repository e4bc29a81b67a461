# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""ChunkPlanner: latency compensation, seams, limits, hold, e-stop, clock jumps."""
import math

import numpy as np
import pytest

from pi0_ros.control import (Chunk, ChunkPlanner, JointLimits, OutsideLimits, PlannerConfig,
                             PlannerState, validate_trajectory)
from pi0_ros.control.planner import _speed_to_stop, max_speed_to_stop, smootherstep

H = 0.02      # default point spacing and control period
TOLERANCE = 1e-9


def make_limits(max_velocity=1.0, max_acceleration=5.0):
    return JointLimits([-1.0, -2.0], [1.0, 2.0], [max_velocity] * 2, [max_acceleration] * 2)


def make_planner(config=None, limits=None, position=(0.0, 0.0), now=0.0):
    planner = ChunkPlanner(config or PlannerConfig(), limits or make_limits())
    planner.reset(np.array(position), now)
    planner.set_enabled(True)
    return planner


def constant_chunk(t0, target, horizon=50, dt=H):
    return Chunk(t0, dt, np.tile(np.asarray(target, dtype=float), (horizon, 1)))


def assert_points_within_limits(planner, points):
    """Assert JTC validity, position/velocity limits and accel-consistent successive points."""
    limits = planner.limits
    assert validate_trajectory(points.times_from_start, points.positions, points.velocities,
                               limits.num_joints) == []
    assert (points.positions >= limits.position_lower).all()
    assert (points.positions <= limits.position_upper).all()
    assert (np.abs(points.velocities) <= limits.max_velocity * (1 + TOLERANCE)).all()
    velocities = np.vstack([planner.commanded_velocity, points.velocities])
    spacing = np.diff(points.times_from_start, prepend=0.0)[:, None]
    step = limits.max_acceleration * spacing
    assert (np.abs(np.diff(velocities, axis=0)) <= step * (1 + TOLERANCE)).all()
    np.testing.assert_array_equal(points.velocities[-1], 0.0)


def run(planner, start, stop, hold_reason=None, period=H, trace=None):
    """Step from start to stop (exclusive); return the PlanPoints, append states to trace."""
    plans = []
    for tick in range(int(round((stop - start) / period))):
        points = planner.step(start + tick * period, hold_reason)
        assert_points_within_limits(planner, points)
        plans.append(points)
        if trace is not None:
            trace.append((planner.commanded_position, planner.commanded_velocity))
    return plans


def test_starts_disabled_and_returns_nothing_before_reset():
    planner = ChunkPlanner(PlannerConfig(), make_limits())
    assert planner.state is PlannerState.DISABLED
    points = planner.step(0.0)
    assert len(points) == 0 and points.state is PlannerState.DISABLED
    assert points.hold_reason == 'not reset'
    assert validate_trajectory(points.times_from_start, points.positions) == [
        'trajectory has no points']
    assert not planner.add_chunk(constant_chunk(0.0, [0.0, 0.0]), 0.0).accepted


def test_reset_without_enable_stays_disabled_and_holds():
    planner = ChunkPlanner(PlannerConfig(), make_limits())
    planner.reset(np.array([0.5, -0.5]), 1.0)
    assert planner.state is PlannerState.DISABLED and planner.hold_reason == 'disabled'
    result = planner.add_chunk(constant_chunk(1.0, [0.0, 0.0]), 1.0)
    assert (result.accepted, result.reason) == (False, 'planner disabled')
    points = planner.step(1.0)
    assert points.state is PlannerState.DISABLED
    np.testing.assert_array_equal(points.positions, np.tile([0.5, -0.5], (10, 1)))
    np.testing.assert_array_equal(points.velocities, 0.0)


def test_reset_validates_and_clamps_the_measured_position():
    planner = ChunkPlanner(PlannerConfig(), make_limits())
    with pytest.raises(ValueError):
        planner.reset(np.array([0.0, math.nan]), 0.0)
    with pytest.raises(ValueError):
        planner.reset(np.array([0.0]), 0.0)
    tolerance = planner.reset_tolerance     # A h^2 / 6 = 5 * 0.02^2 / 6
    np.testing.assert_allclose(tolerance, 5.0 * H * H / 6.0)
    planner.reset(np.array([1.0 + 0.9 * tolerance[0], 0.0]), 0.0)
    np.testing.assert_array_equal(planner.commanded_position, [1.0, 0.0])


def test_a_position_far_outside_the_limits_is_refused_not_jumped_from():
    # Clipping 1.5 to the bound 1.0 would command 0.5 rad within one point spacing.
    planner = ChunkPlanner(PlannerConfig(), make_limits())
    with pytest.raises(OutsideLimits, match=r'joint 0 at 1\.5000 \(limits -1\.0000 \.\. 1'):
        planner.reset(np.array([1.5, 0.0]), 0.0)
    # Named joints are named.
    named = JointLimits([-1.0, -2.0], [1.0, 2.0], [1.0, 1.0], [5.0, 5.0],
                        names=['shoulder_pan', 'elbow_flex'])
    with pytest.raises(OutsideLimits, match=r'^[^,]*: elbow_flex at -2\.5000 \(limits -2'):
        ChunkPlanner(PlannerConfig(), named).reset(np.array([0.0, -2.5]), 0.0)
    planner.set_enabled(True)
    assert planner.state is PlannerState.DISABLED and len(planner.step(0.0)) == 0
    # An earlier start stays as it was: the refused position does not replace it.
    planner.reset(np.array([0.5, 0.0]), 1.0)
    with pytest.raises(OutsideLimits):
        planner.reset(np.array([0.0, -2.5]), 1.1)
    np.testing.assert_array_equal(planner.step(1.1).positions[0], [0.5, 0.0])


def test_a_moving_start_continues_the_measured_velocity_and_brakes_until_a_chunk():
    # The arm still moves at 0.6 rad/s when the policy takes over (another commander let go).
    planner = ChunkPlanner(PlannerConfig(), make_limits())
    planner.reset(np.array([0.0, 0.5]), 0.0, velocity=np.array([0.6, 0.0]))
    planner.set_enabled(True)
    np.testing.assert_array_equal(planner.commanded_velocity, [0.6, 0.0])
    trace = []
    plans = run(planner, 0.0, 0.2, trace=trace)
    assert plans[0].hold_reason == 'waiting for chunk'
    # The first point brakes by A h from the measured speed: no stop within one point.
    assert plans[0].velocities[0, 0] == pytest.approx(0.6 - 5.0 * H)
    speeds = [velocity[0] for _, velocity in trace]
    assert all(later <= earlier for earlier, later in zip(speeds, speeds[1:]))
    assert speeds[-1] == 0.0 and trace[-1][0][0] == pytest.approx(0.6 ** 2 / 10.0, abs=0.01)
    assert planner.add_chunk(constant_chunk(0.2, [0.0, 0.5]), 0.2).accepted
    assert planner.step(0.2).state is PlannerState.FOLLOWING


def test_a_moving_start_is_bounded_by_every_limit():
    planner = ChunkPlanner(PlannerConfig(), make_limits())
    # Beyond the velocity limit (1.0), and faster than a plan can stop from (A h (N-1) = 0.9).
    np.testing.assert_allclose(planner.startable_velocity(np.zeros(2), np.array([3.0, -0.95])),
                               [0.9, -0.9])
    # Toward a limit too close to brake from full speed; moving out of the limits at a bound.
    near = np.array([0.98, -2.0])
    bounded = planner.startable_velocity(near, np.array([0.8, -0.5]))
    assert 0.0 < bounded[0] < 0.8 and bounded[1] == 0.0
    planner.reset(near, 0.0, velocity=np.array([0.8, -0.5]))
    planner.set_enabled(True)
    run(planner, 0.0, 0.3)                   # every plan inside all limits (run asserts it)
    assert planner.commanded_position[0] <= 1.0 and not np.any(planner.commanded_velocity)
    with pytest.raises(ValueError, match='reset velocity'):
        planner.reset(np.zeros(2), 0.0, velocity=np.array([math.inf, 0.0]))
    with pytest.raises(ValueError, match='reset velocity'):
        planner.reset(np.zeros(2), 0.0, velocity=np.zeros(3))


def test_holds_the_reset_position_before_the_first_chunk():
    planner = make_planner(position=(0.25, -0.75))
    points = planner.step(0.0)
    assert points.state is PlannerState.HOLDING and points.hold_reason == 'waiting for chunk'
    np.testing.assert_allclose(points.times_from_start, H * np.arange(1, 11), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(points.positions, np.tile([0.25, -0.75], (10, 1)))
    np.testing.assert_array_equal(points.velocities, 0.0)
    assert points.start_time == 0.0


def test_past_actions_are_counted_and_never_executed():
    planner = make_planner(now=1.5)
    actions = np.zeros((8, 2))
    actions[:4] = 0.9        # meant for 1.0, 1.125, 1.25, 1.375: already past at 1.5
    result = planner.add_chunk(Chunk(1.0, 0.125, actions), now=1.5)
    assert (result.accepted, result.skipped_actions, result.reason) == (True, 4, 'accepted')
    plans = run(planner, 1.5, 2.5)
    assert plans[0].state is PlannerState.FOLLOWING
    assert max(np.abs(p.positions).max() for p in plans) == 0.0
    assert planner.remaining_horizon(1.5) == 0.375
    assert planner.remaining_horizon(3.0) == 0.0


def test_a_chunk_wholly_in_the_past_is_rejected():
    planner = make_planner(now=2.0)
    result = planner.add_chunk(constant_chunk(1.0, [0.5, 0.5], horizon=10, dt=0.1), now=2.0)
    assert not result.accepted
    assert result.skipped_actions == 10
    assert 'past' in result.reason
    assert planner.remaining_horizon(2.0) == 0.0


@pytest.mark.parametrize('chunk, reason', [
    (Chunk(0.0, H, np.array([[0.0, 0.0], [math.nan, 0.0]])), 'non-finite'),
    (Chunk(0.0, H, np.array([[0.0, 0.0], [math.inf, 0.0]])), 'non-finite'),
    (Chunk(0.0, H, np.zeros((5, 3))), '3 joints, expected 2'),
    (Chunk(0.0, 0.0, np.zeros((5, 2))), 'time base'),
    (Chunk(math.nan, H, np.zeros((5, 2))), 'time base'),
])
def test_bad_chunks_are_rejected_and_the_plan_goes_on(chunk, reason):
    planner = make_planner()
    assert planner.add_chunk(constant_chunk(0.0, [0.5, 0.5]), 0.0).accepted
    before = planner.step(0.0)
    result = planner.add_chunk(chunk, 0.0)
    assert not result.accepted and reason in result.reason
    after = planner.step(0.0)
    np.testing.assert_array_equal(after.positions, before.positions)
    assert after.state is PlannerState.FOLLOWING


def test_a_chunk_older_than_the_executing_one_is_rejected():
    planner = make_planner()
    assert planner.add_chunk(constant_chunk(0.5, [0.1, 0.1]), 0.5).accepted
    result = planner.add_chunk(constant_chunk(0.4, [0.2, 0.2]), 0.5)
    assert not result.accepted and 'older' in result.reason


def test_a_chunk_stamped_in_the_future_does_not_lock_out_the_chunks_after_it():
    # A camera clock 0.4 s ahead stamps one observation: its t0 counts as its arrival time, so
    # the next chunks, stamped correctly after that arrival, are still accepted.
    planner = make_planner(now=1.0)
    assert planner.add_chunk(constant_chunk(1.4, [0.1, 0.1]), 1.0).accepted
    run(planner, 1.0, 1.06)
    assert planner.add_chunk(constant_chunk(1.02, [0.0, 0.0]), 1.06).accepted
    result = planner.add_chunk(constant_chunk(0.98, [0.2, 0.2]), 1.08)
    assert not result.accepted and 'older' in result.reason


def test_a_far_target_is_approached_at_bounded_speed_without_overshoot():
    planner = make_planner()            # A = 5, h = 0.02, N = 10: speed cap 0.9 < 1.0
    np.testing.assert_allclose(planner.effective_max_velocity, [0.9, 0.9])
    assert planner.add_chunk(constant_chunk(0.0, [0.8, -0.5], horizon=200), 0.0).accepted
    trace = []
    run(planner, 0.0, 3.0, trace=trace)
    positions, velocities = (np.array(values) for values in zip(*trace))
    assert np.abs(velocities).max() == pytest.approx(0.9, abs=1e-12)
    assert positions[:, 0].max() <= 0.8 + 1e-12 and positions[:, 1].min() >= -0.5 - 1e-12
    np.testing.assert_allclose(positions[-1], [0.8, -0.5], atol=1e-12)
    np.testing.assert_array_equal(velocities[-1], 0.0)


def test_max_velocity_binds_when_below_the_horizon_cap():
    planner = make_planner(limits=make_limits(max_velocity=0.5, max_acceleration=20.0))
    planner.add_chunk(constant_chunk(0.0, [0.9, 0.0], horizon=200), 0.0)
    trace = []
    run(planner, 0.0, 1.0, trace=trace)
    assert max(abs(velocity[0]) for _, velocity in trace) == 0.5


def test_target_beyond_the_limit_is_clamped_exactly_at_the_bound():
    planner = make_planner()
    planner.add_chunk(constant_chunk(0.0, [3.0, -5.0], horizon=200), 0.0)
    plans = run(planner, 0.0, 4.0)
    assert max(p.positions[:, 0].max() for p in plans) == 1.0
    assert min(p.positions[:, 1].min() for p in plans) == -2.0
    np.testing.assert_array_equal(planner.commanded_position, [1.0, -2.0])


def test_braking_distance_keeps_a_hold_at_full_speed_inside_the_limits():
    planner = make_planner(limits=make_limits(max_velocity=2.0, max_acceleration=2.0),
                           config=PlannerConfig(points_per_message=50))
    planner.add_chunk(constant_chunk(0.0, [5.0, 0.0], horizon=500), 0.0)
    run(planner, 0.0, 0.8)
    assert planner.commanded_velocity[0] > 1.0
    plans = run(planner, 0.8, 2.0, hold_reason='stale observation')
    assert max(p.positions[:, 0].max() for p in plans) <= 1.0
    np.testing.assert_array_equal(planner.commanded_velocity, 0.0)


def test_exact_discrete_braking_distance():
    accel, h = np.array([5.0]), 0.02
    for speed in (0.0, 0.05, 0.1, 0.37, 0.9):
        room = 0.0
        velocity = speed                            # brake by accel * h per point from `speed`
        while velocity > 0:
            next_velocity = max(velocity - accel[0] * h, 0.0)
            room += 0.5 * h * (velocity + next_velocity)
            velocity = next_velocity
        room += 0.5 * h * speed                     # the step that reaches `speed`
        speed_found = max_speed_to_stop(np.array([room]), accel, h)[0]
        assert speed_found == pytest.approx(speed, abs=1e-12)
    assert max_speed_to_stop(np.array([-0.01]), accel, h)[0] == pytest.approx(-1.0)
    assert max_speed_to_stop(np.array([math.inf]), accel, h)[0] == math.inf


def test_the_trackers_scalar_stopping_speed_equals_the_array_version_to_the_bit():
    rng = np.random.default_rng(3)
    accel, h = rng.uniform(2.0, 20.0, 200), 0.02
    rooms = np.concatenate([rng.uniform(-0.05, 0.5, 100), rng.uniform(0.0, 1e-4, 96),
                            [0.0, -0.0, math.inf, 1e-300]])
    for first_step in (h, 0.0137, 1e-9):
        expected = max_speed_to_stop(rooms, accel, h, first_step)
        found = [_speed_to_stop(float(r), float(a), h, first_step) for r, a in zip(rooms, accel)]
        np.testing.assert_array_equal(found, expected)
    assert _speed_to_stop(1e308, 1.0, h, h) == math.inf   # overflow: unbounded, not NaN


def test_smootherstep_is_flat_at_both_ends():
    values = smootherstep(np.array([-1.0, 0.0, 0.5, 1.0, 2.0]))
    np.testing.assert_array_equal(values, [0.0, 0.0, 0.5, 1.0, 1.0])


def test_a_new_chunk_blends_in_with_a_continuous_seam():
    config = PlannerConfig(blend_duration=0.2)
    planner = make_planner(config=config)
    ramp = np.linspace(0.0, 0.49, 50)[:, None] * np.array([1.0, -1.0])
    planner.add_chunk(Chunk(0.0, H, ramp), 0.0)
    run(planner, 0.0, 0.5)
    arrival = 0.5
    planner.step(arrival)
    probe = arrival + np.array([-0.1, -1e-3, 0.0, 1e-4, 1e-3, 1e-2, 0.1, 0.19])
    old = planner.reference(probe)
    state_before = (planner.commanded_position, planner.commanded_velocity)
    other = Chunk(0.45, H, np.tile([0.0, 0.3], (50, 1)))
    assert planner.add_chunk(other, arrival).accepted
    new = planner.reference(probe)
    # Up to the arrival the reference is unchanged, bit for bit.
    np.testing.assert_array_equal(new[:3], old[:3])
    # After it, it leaves the old one with zero slope and curvature: |new - old| <= 10 x^3 |d|.
    x = (probe[3:] - arrival) / config.blend_duration
    bound = 10.0 * x[:, None] ** 3 * np.abs(other.sample_many(probe[3:]) - old[3:]) + 1e-15
    assert (np.abs(new[3:] - old[3:]) <= bound).all()
    assert np.abs(new[3] - old[3]).max() < 1e-9
    # The commanded state does not move when a chunk is added.
    points = planner.step(arrival)
    np.testing.assert_array_equal(planner.commanded_position, state_before[0])
    np.testing.assert_array_equal(planner.commanded_velocity, state_before[1])
    assert_points_within_limits(planner, points)


def test_successive_plans_join_without_a_step():
    planner = make_planner()
    planner.add_chunk(Chunk(0.0, H, np.linspace(0, 0.5, 60)[:, None] * [1.0, 1.0]), 0.0)
    previous = planner.step(0.0)
    for tick in range(1, 40):
        points = planner.step(tick * H)
        # The new plan starts exactly where the executing plan is (its first point, here).
        np.testing.assert_allclose(planner.commanded_position, previous.positions[0],
                                   rtol=0, atol=1e-12)
        np.testing.assert_allclose(planner.commanded_velocity, previous.velocities[0],
                                   rtol=0, atol=1e-12)
        previous = points


def test_the_commanded_state_follows_the_published_plan_between_ticks():
    planner = make_planner()
    planner.add_chunk(constant_chunk(0.0, [0.5, 0.5], horizon=100), 0.0)
    run(planner, 0.0, 0.1)
    plan = planner.step(0.1)
    v_start, q_start = planner.commanded_velocity, planner.commanded_position
    planner.step(0.113)                      # 13 ms into the first segment
    acceleration = (plan.velocities[0] - v_start) / H
    tau = 0.113 - 0.1
    np.testing.assert_allclose(planner.commanded_position,
                               q_start + v_start * tau + 0.5 * acceleration * tau ** 2,
                               rtol=0, atol=1e-12)
    # A stall longer than the plan: the controller stopped at its last point.
    last = planner.step(0.113).positions[-1]
    planner.step(5.0)
    np.testing.assert_array_equal(planner.commanded_position, last)
    np.testing.assert_array_equal(planner.commanded_velocity, 0.0)


def test_a_constant_velocity_chunk_is_tracked_exactly():
    planner = make_planner(config=PlannerConfig(blend_duration=0.0))
    times = H * np.arange(100)
    chunk = Chunk(0.0, H, np.stack([0.3 * times, -0.2 * times], axis=1))
    planner.add_chunk(chunk, 0.0)
    run(planner, 0.0, 0.6)                  # catch up with the moving reference
    trace = []
    plans = run(planner, 0.6, 1.5, trace=trace)
    for points, (position, velocity) in zip(plans, trace):
        np.testing.assert_allclose(position, chunk.sample(points.start_time), rtol=0, atol=1e-9)
        np.testing.assert_allclose(velocity, [0.3, -0.2], rtol=0, atol=1e-9)


def test_chunk_exhausted_stops_at_the_last_action():
    planner = make_planner()
    planner.add_chunk(Chunk(0.0, 0.1, np.linspace([0.0, 0.0], [0.3, -0.3], 5)), 0.0)
    plans = run(planner, 0.0, 1.5)
    assert plans[0].state is PlannerState.FOLLOWING
    assert plans[20].hold_reason is None            # t = 0.4 = end_time: still following
    assert plans[21].state is PlannerState.HOLDING
    assert plans[21].hold_reason == 'chunk exhausted'
    np.testing.assert_allclose(planner.commanded_position, [0.3, -0.3], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(plans[-1].velocities, 0.0)


def test_a_hold_that_ends_before_rest_keeps_braking_instead_of_turning_back():
    planner = make_planner()
    planner.add_chunk(constant_chunk(0.0, [0.9, 0.0], horizon=200), 0.0)
    run(planner, 0.0, 0.5)
    run(planner, 0.5, 0.56, hold_reason='joint states stale')   # three braking ticks
    trace = []
    plans = run(planner, 0.56, 0.9, trace=trace)                 # the hold is over, no chunk
    speeds = [velocity[0] for _, velocity in trace]
    assert all(later <= earlier for earlier, later in zip(speeds, speeds[1:]))
    assert min(speeds) >= 0.0 and speeds[-1] == 0.0              # never turned back
    assert plans[0].hold_reason == 'waiting for chunk'
    positions = [position[0] for position, _ in trace]
    assert all(later >= earlier for earlier, later in zip(positions, positions[1:]))


def test_hold_reason_decelerates_at_the_limit_then_stays():
    planner = make_planner()
    planner.add_chunk(constant_chunk(0.0, [0.9, 0.0], horizon=200), 0.0)
    run(planner, 0.0, 0.5)
    speed = planner.commanded_velocity[0]
    assert speed == pytest.approx(0.9)
    points = planner.step(0.5, hold_reason='stale observation')
    assert points.state is PlannerState.HOLDING and points.hold_reason == 'stale observation'
    expected = np.maximum(speed - 5.0 * H * np.arange(1, 11), 0.0)
    np.testing.assert_allclose(points.velocities[:, 0], expected, rtol=0, atol=1e-12)
    plans = run(planner, 0.52, 1.0, hold_reason='stale observation')
    stop = plans[-1].positions[0]
    np.testing.assert_array_equal(plans[-1].positions, np.tile(stop, (10, 1)))
    # Released: the interrupted chunk is gone; it waits for a new one, then follows it.
    points = planner.step(1.0)
    assert points.state is PlannerState.HOLDING and points.hold_reason == 'waiting for chunk'
    np.testing.assert_array_equal(points.positions, np.tile(stop, (10, 1)))
    assert planner.add_chunk(constant_chunk(1.0, [0.0, 0.0]), 1.0).accepted
    assert planner.step(1.0).state is PlannerState.FOLLOWING


def test_estop_latches_until_cleared():
    planner = make_planner()
    planner.add_chunk(constant_chunk(0.0, [0.9, 0.0], horizon=500), 0.0)
    run(planner, 0.0, 0.3)
    planner.estop()
    assert planner.state is PlannerState.ESTOP and planner.hold_reason == 'e-stop'
    rejected = planner.add_chunk(constant_chunk(0.3, [0.9, 0.0]), 0.3)
    assert (rejected.accepted, rejected.reason) == (False, 'e-stop latched')
    plans = run(planner, 0.3, 1.0)
    assert all(p.state is PlannerState.ESTOP for p in plans)
    np.testing.assert_array_equal(plans[-1].velocities, 0.0)
    stop = planner.commanded_position
    planner.set_enabled(True)
    assert planner.step(1.0).state is PlannerState.ESTOP        # enabling does not clear it
    planner.clear_estop()
    points = planner.step(1.02)
    assert points.state is PlannerState.HOLDING and points.hold_reason == 'waiting for chunk'
    np.testing.assert_array_equal(points.positions, np.tile(stop, (10, 1)))


def test_disable_holds_and_rejects_chunks():
    planner = make_planner()
    planner.add_chunk(constant_chunk(0.0, [0.5, 0.5]), 0.0)
    run(planner, 0.0, 0.2)
    planner.set_enabled(False)
    assert planner.state is PlannerState.DISABLED
    plans = run(planner, 0.2, 0.8)
    assert plans[-1].state is PlannerState.DISABLED and plans[-1].hold_reason == 'disabled'
    np.testing.assert_array_equal(plans[-1].velocities, 0.0)
    assert planner.add_chunk(constant_chunk(0.8, [0.5, 0.5]), 0.8).reason == 'planner disabled'


def test_clock_jumping_back_at_rest_holds_the_commanded_position():
    planner = make_planner(position=(0.3, -0.2), now=100.0)
    run(planner, 100.0, 100.1)
    points = planner.step(3.0)                      # sim time restarted
    assert points.state is PlannerState.HOLDING
    assert points.hold_reason == 'clock jumped backwards'
    np.testing.assert_array_equal(points.positions, np.tile([0.3, -0.2], (10, 1)))
    np.testing.assert_array_equal(points.velocities, 0.0)
    assert planner.remaining_horizon(3.0) == 0.0
    # Chunks on the new time base are accepted (not "older than the executing one").
    assert planner.add_chunk(constant_chunk(3.0, [0.0, 0.0]), 3.0).accepted
    assert planner.step(3.02).state is PlannerState.FOLLOWING


def test_clock_jumping_back_while_moving_continues_the_motion_and_brakes_within_limits():
    planner = make_planner(now=100.0)
    planner.add_chunk(constant_chunk(100.0, [0.9, 0.9], horizon=100), 100.0)
    run(planner, 100.0, 100.3)
    assert np.all(planner.commanded_velocity > 0.5)
    last_plan = planner.step(100.3)                # its first point is one period later
    np.testing.assert_allclose(last_plan.times_from_start[0], H, rtol=1e-6)
    position, velocity = planner.commanded_position, planner.commanded_velocity
    points = planner.step(3.0)                      # sim time restarted
    assert points.hold_reason == 'clock jumped backwards'
    # The state carried over is the old plan's at its next point (one period after the tick).
    np.testing.assert_allclose(planner.commanded_position, last_plan.positions[0], atol=1e-12)
    np.testing.assert_allclose(planner.commanded_velocity, last_plan.velocities[0], atol=1e-12)
    assert np.all(planner.commanded_position > position)
    assert np.all(planner.commanded_velocity <= velocity + 1e-12)
    assert_points_within_limits(planner, points)
    trace = []
    run(planner, 3.02, 3.5, trace=trace)            # brakes to rest, then stays
    assert np.all(trace[-1][1] == 0.0)
    assert planner.add_chunk(constant_chunk(3.5, [0.0, 0.0]), 3.5).accepted
    assert planner.step(3.52).state is PlannerState.FOLLOWING


def test_limits_hold_on_the_wall_clock_when_a_tick_falls_just_before_a_grid_point():
    # Near 1.7e9 s an absolute-time difference keeps ~0.2 us; a first point ~1e-6 h after now
    # must still get its own step length, not a rounded one (the acceleration check is exact).
    limits = JointLimits(np.full(2, -3.0), np.full(2, 3.0), np.full(2, 2.0), np.full(2, 10.0))
    planner = ChunkPlanner(PlannerConfig(), limits)
    origin = 1_700_000_000.25
    planner.reset(np.zeros(2), origin)
    planner.set_enabled(True)
    planner.add_chunk(Chunk(origin, H, np.tile([2.5, -2.5], (200, 1))), origin)
    for k in range(1, 120):
        for offset in (-1.5e-6 * H, 0.0, 0.3 * H):
            points = planner.step(origin + k * H + offset)
            assert_points_within_limits(planner, points)


def test_temporal_ensembling_averages_overlapping_chunks_with_act_weights():
    config = PlannerConfig(temporal_ensembling=True, ensembling_decay=0.5)
    planner = make_planner(config=config)
    planner.add_chunk(constant_chunk(0.0, [0.2, 0.0], horizon=100), 0.0)
    run(planner, 0.0, 0.3)
    planner.add_chunk(constant_chunk(0.3, [0.6, 0.0], horizon=100), 0.3)
    run(planner, 0.3, 0.6)
    weight = math.exp(-0.5)
    expected = (0.2 + weight * 0.6) / (1 + weight)
    np.testing.assert_allclose(planner.reference(np.array([0.6, 1.0]))[:, 0], expected,
                               rtol=0, atol=1e-15)
    # After the first chunk ends (t > 1.98) only the second one is left.
    np.testing.assert_allclose(planner.reference(np.array([2.0]))[0, 0], 0.6, rtol=0, atol=0)
    plain = make_planner()
    plain.add_chunk(constant_chunk(0.0, [0.2, 0.0], horizon=100), 0.0)
    run(plain, 0.0, 0.3)
    plain.add_chunk(constant_chunk(0.3, [0.6, 0.0], horizon=100), 0.3)
    run(plain, 0.3, 0.6)
    assert plain.reference(np.array([0.6]))[0, 0] == 0.6


def test_same_inputs_give_bit_identical_plans():
    def scenario():
        planner = make_planner()
        out = []
        for tick in range(60):
            now = tick * H
            if tick % 5 == 0:
                t = now - 0.03 + H * np.arange(50)
                actions = np.stack([0.5 * np.sin(t), 0.4 * np.cos(t)], axis=1)
                planner.add_chunk(Chunk(now - 0.03, H, actions), now)
            out.append(planner.step(now).positions)
        return np.array(out)
    np.testing.assert_array_equal(scenario(), scenario())


def test_latency_is_compensated_on_a_chunk_stream():
    # Chunks every 0.1 s, each made from an observation 80 ms old: the arm is where the policy
    # wants it now, not 80 ms behind (which would be off by up to 0.05 rad here).
    def target(t):
        return np.stack([0.2 * np.sin(math.pi * t), -0.3 * np.sin(0.5 * math.pi * t)], axis=-1)

    planner = make_planner()
    errors = []
    for tick in range(300):
        now = tick * H
        if tick % 5 == 0:
            t0 = now - 0.08
            result = planner.add_chunk(Chunk(t0, H, target(t0 + H * np.arange(50))), now)
            assert result.accepted and result.skipped_actions == 4
        planner.step(now)
        errors.append(np.abs(planner.commanded_position - target(now)).max())
    assert max(errors[100:]) < 1e-4
    assert np.abs(target(np.arange(100, 300) * H) - target(np.arange(96, 296) * H)).max() > 0.04


def test_first_point_is_positive_on_a_clock_near_ros_epoch_time():
    # Near 1.8e9 s a float64 difference of absolute times keeps ~0.2 us: the times from now
    # must still be strictly positive when now falls a hair before a grid point.
    limits = JointLimits(np.full(2, -1.0), np.full(2, 1.0), np.full(2, 1.0), np.full(2, 5.0))
    config = PlannerConfig()
    planner = ChunkPlanner(config, limits)
    origin = 1_796_287_757.123456
    planner.reset(np.zeros(2), origin)
    planner.set_enabled(True)
    for k in range(1, 400):
        for offset in (-3e-7, -1e-7, 0.0, 1e-7):
            now = origin + k * config.point_spacing + offset
            points = planner.step(now)
            assert points.times_from_start[0] > 0.0
            assert round(points.times_from_start[0] * 1e9) >= 1
            assert points.times_from_start[0] <= config.point_spacing * (1 + 1e-6) + 1e-6
