# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Seam metrics: how a new chunk continues the executing one."""
import math

import numpy as np

from pi0_ros.control import Chunk, ChunkPlanner, JointLimits, PlannerConfig
from pi0_ros.control.seams import (evaluate_seams, overlap_disagreement,
                                   reference_acceleration)

DT = 0.02


def ramp(t0, horizon=50, joints=2, slope=0.5, offset=0.0):
    """Return a chunk of positions slope * t + offset on the absolute time line."""
    times = t0 + DT * np.arange(horizon)
    return Chunk(t0, DT, np.repeat((slope * times + offset)[:, None], joints, axis=1))


def test_a_chunk_that_continues_the_executing_one_disagrees_by_nothing():
    seam = overlap_disagreement(ramp(0.0), ramp(0.3), switch_time=0.35)
    # New actions at 0.30 + k DT inside [0.35, 0.98]: k = 3 .. 34 (0.36 .. 0.98).
    assert seam.overlap_steps == 32
    assert seam.position_rms < 1e-12 and seam.velocity_rms < 1e-9


def test_an_offset_is_a_position_disagreement_and_a_slope_a_velocity_one():
    offset = overlap_disagreement(ramp(0.0), ramp(0.3, offset=0.1), switch_time=0.3)
    assert math.isclose(offset.position_rms, 0.1 * math.sqrt(2), rel_tol=1e-9)
    assert len(offset.position_gaps) == offset.overlap_steps
    assert all(math.isclose(gap, 0.1 * math.sqrt(2), rel_tol=1e-9) for gap in offset.position_gaps)
    assert offset.velocity_rms < 1e-9
    steeper = overlap_disagreement(ramp(0.0), ramp(0.3, slope=1.5, offset=-0.3),
                                   switch_time=0.3)
    assert math.isclose(steeper.velocity_rms, 1.0 * math.sqrt(2), rel_tol=1e-6)


def test_chunks_on_other_time_grids_compare_between_actions():
    executing = ramp(0.0)
    shifted = ramp(0.311)  # actions between the executing chunk's
    assert overlap_disagreement(executing, shifted, 0.311).position_rms < 1e-12


def test_no_overlap_no_seam():
    assert overlap_disagreement(ramp(0.0, horizon=10), ramp(0.5), switch_time=0.5) is None
    assert overlap_disagreement(ramp(0.0), ramp(0.3), switch_time=0.975) is None  # one action


def test_reference_acceleration_of_a_parabola_is_its_acceleration():
    def parabola(times):
        return np.stack([1.5 * times ** 2, -0.5 * times ** 2], axis=1)
    ratio = reference_acceleration(parabola, 1.0, np.array([6.0, 6.0]), step=0.01, window=0.2)
    assert math.isclose(ratio, 3.0 / 6.0, rel_tol=1e-6)


def test_blending_keeps_the_seam_inside_the_acceleration_limit_where_a_switch_does_not():
    limits = JointLimits(np.array([-3.0, -3.0]), np.array([3.0, 3.0]), np.array([2.0, 2.0]),
                         np.array([10.0, 10.0]))
    ratios = {}
    for blend in (0.0, 0.2):
        planner = ChunkPlanner(PlannerConfig(control_period=0.02, point_spacing=0.02,
                                             blend_duration=blend), limits)
        planner.reset(np.zeros(2), 0.0)
        planner.set_enabled(True)
        planner.step(0.0)
        assert planner.add_chunk(ramp(0.0, slope=0.0), 0.0).accepted
        planner.step(0.02)
        assert planner.add_chunk(ramp(0.1, slope=0.0, offset=0.05), 0.3).accepted
        ratios[blend] = reference_acceleration(planner.reference, 0.3, limits.max_acceleration,
                                               step=0.02, window=0.3)
    # A 5 cm step at the switch: 0.05 / 0.02^2 = 125 rad/s^2, 12.5x the limit; blended over
    # 0.2 s with a smootherstep its peak is 5.77 * 0.05 / 0.2^2 = 7.2 rad/s^2 (0.72x).
    assert ratios[0.0] > 10.0
    assert 0.5 < ratios[0.2] < 1.0


def test_a_replayed_run_measures_each_seam_of_the_chunks_the_planner_took():
    limits = JointLimits(np.array([-3.0, -3.0]), np.array([3.0, 3.0]), np.array([2.0, 2.0]),
                         np.array([10.0, 10.0]))
    config = PlannerConfig(control_period=0.02, point_spacing=0.02, blend_duration=0.0)
    arrivals = [(0.10, ramp(0.05)), (0.20, ramp(0.15, offset=0.1)),
                (0.25, ramp(0.10)),                       # older than the executing: rejected
                (0.30, ramp(0.25, offset=0.1))]           # continues the second exactly
    seams = evaluate_seams(arrivals, config, limits)
    assert [s['switch_time'] for s in seams] == [0.20, 0.30]
    assert math.isclose(seams[0]['position_rms'], 0.1 * math.sqrt(2), rel_tol=1e-9)
    assert seams[1]['position_rms'] < 1e-12
    # The 10 cm switch with no blending: 0.1 / 0.02^2 = 250 rad/s^2 against 10.
    assert seams[0]['reference_acceleration'] > 20.0
    assert seams[0]['chunk_acceleration'] < 1e-6  # a ramp: all of it is the hand-over's
    assert seams[0]['handover_acceleration'] > 20.0
    assert seams[1]['handover_acceleration'] < 1e-6
    assert seams[1]['reference_acceleration'] < 1e-6


def test_a_rough_chunk_that_continues_the_plan_adds_no_acceleration_at_its_seam():
    limits = JointLimits(np.array([-3.0, -3.0]), np.array([3.0, 3.0]), np.array([2.0, 2.0]),
                         np.array([10.0, 10.0]))
    config = PlannerConfig(control_period=0.02, point_spacing=0.02, blend_duration=0.0)
    rough = np.random.default_rng(0).normal(0.0, 0.05, (200, 2))  # on one time grid
    executing = Chunk(0.0, DT, rough[:50])
    new = Chunk(0.2, DT, rough[10:60])  # the same motion from 0.2 s on
    seam = evaluate_seams([(0.1, executing), (0.25, new)], config, limits)[0]
    assert seam['chunk_acceleration'] > 5.0        # the chunk's own roughness
    assert seam['handover_acceleration'] < 1e-6    # the switch adds nothing to it
