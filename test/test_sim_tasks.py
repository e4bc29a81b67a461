# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The touch task (seeded episodes, the judge) and its scripted expert, without ROS."""
import itertools
import math

import numpy as np
import pytest

from pi0_ros.control.follower import TrajectoryFollower
from pi0_ros.sim.expert import (joint_path, LIMIT_FRACTION, minimum_jerk_duration, path_command,
                                plan_touch, ToolIK)
from pi0_ros.sim.scene import (HOME_POSITION, HOME_TOOL_XY, JOINT_NAMES, OBJECTS, SimScene,
                               SO101_JOINT_LIMITS)
from pi0_ros.sim.tasks import (EpisodeJudge, HOME_CLEARANCE, instruction_for, make_episode,
                               MIN_SEPARATION, Outcome, PLACEMENT_RADIUS, SUCCESS_DISTANCE)

NAMES = [item.name for item in OBJECTS]


def test_episodes_are_seeded_separated_and_name_one_object():
    assert make_episode(3, 7) == make_episode(3, 7)
    assert make_episode(3, 7).placements != make_episode(4, 7).placements
    assert make_episode(3, 7).placements != make_episode(3, 8).placements
    targets = set()
    for index in range(60):
        episode = make_episode(index, 0)
        targets.add(episode.target)
        assert episode.instruction == instruction_for(episode.target)
        assert set(episode.placements) == set(NAMES)
        centres = [np.array(p[:2]) for p in episode.placements.values()]
        for a, b in itertools.combinations(centres, 2):
            assert np.linalg.norm(a - b) >= MIN_SEPARATION
        for centre in centres:
            assert PLACEMENT_RADIUS[0] <= np.linalg.norm(centre) <= PLACEMENT_RADIUS[1]
            assert np.linalg.norm(centre - HOME_TOOL_XY) >= HOME_CLEARANCE
    assert targets == set(NAMES)  # every object is named in some episode
    assert instruction_for('yellow_block') == 'touch the yellow block'
    with pytest.raises(ValueError):
        make_episode(-1)


def test_judge_latches_success_wrong_object_and_timeout():
    episode = make_episode(0, 0)
    others = [name for name in NAMES if name != episode.target]
    positions = {name: np.array([*p[:2], 0.02]) for name, p in episode.placements.items()}
    far = np.array([0.0, 0.0, 0.5])
    judge = EpisodeJudge(episode, start_time=10.0, timeout=5.0)
    assert judge.update(11.0, far, positions) == Outcome.RUNNING
    near = positions[episode.target] + [0.0, 0.0, SUCCESS_DISTANCE * 0.99]
    assert judge.update(12.5, near, positions) == Outcome.SUCCESS
    assert judge.outcome_time == pytest.approx(2.5)
    # Decided: touching another object afterwards changes nothing.
    assert judge.update(13.0, positions[others[0]], positions) == Outcome.SUCCESS

    wrong = EpisodeJudge(episode, start_time=0.0, timeout=5.0)
    assert wrong.update(1.0, positions[others[1]], positions) == Outcome.WRONG_OBJECT
    just_out = positions[episode.target] + [0.0, 0.0, SUCCESS_DISTANCE * 1.01]
    late = EpisodeJudge(episode, start_time=0.0, timeout=5.0)
    assert late.update(4.9, just_out, positions) == Outcome.RUNNING
    assert late.update(5.0, just_out, positions) == Outcome.TIMEOUT
    assert late.target_distance == pytest.approx(SUCCESS_DISTANCE * 1.01)
    assert EpisodeJudge(episode, 0.0, timeout=0.0).update(1e6, far, positions) == Outcome.RUNNING


def test_minimum_jerk_path_stays_within_the_limits_and_ends_at_rest():
    start = np.array(HOME_POSITION)
    end = start + [0.8, -0.4, 0.3, -0.6, 0.0, 0.0]
    duration = minimum_jerk_duration(start, end)
    path = joint_path([start, end], [duration])
    assert path.duration == pytest.approx(duration)
    np.testing.assert_allclose(path.positions[0], start)
    np.testing.assert_allclose(path.positions[-1], end)
    assert not path.velocities[-1].any() and not path.accelerations[-1].any()
    velocity = LIMIT_FRACTION * np.array(SO101_JOINT_LIMITS.max_velocity)
    acceleration = LIMIT_FRACTION * np.array(SO101_JOINT_LIMITS.max_acceleration)
    assert np.all(np.abs(path.velocities) <= velocity * (1 + 1e-6))
    assert np.all(np.abs(path.accelerations) <= acceleration * (1 + 1e-6))
    # One joint is at its bound: the duration is the shortest that keeps them.
    ratio = max((np.abs(path.velocities) / velocity).max(),
                (np.abs(path.accelerations) / acceleration).max())
    assert ratio > 0.97
    # The sampled velocities are the derivative of the sampled positions.
    numeric = np.gradient(path.positions, path.times, axis=0)
    np.testing.assert_allclose(numeric[1:-1], path.velocities[1:-1], atol=0.02)


@pytest.mark.sim
def test_the_expert_touches_the_named_object_through_the_follower():
    scene = SimScene(64, 64)
    try:
        tool = scene.tool_position()
        np.testing.assert_allclose(tool[:2], HOME_TOOL_XY, atol=2e-3)
        ik = ToolIK(scene.model)
        half_height = {item.name: item.half_height for item in OBJECTS}
        for index in range(12):
            episode = make_episode(index, 0)
            scene.reset(HOME_POSITION, episode.placements)
            start = scene.time
            placed = scene.object_positions()[episode.target]
            np.testing.assert_allclose(placed[:2], episode.placements[episode.target][:2])
            path = plan_touch(ik, HOME_POSITION, placed, half_height[episode.target])
            follower = TrajectoryFollower(JOINT_NAMES, HOME_POSITION)
            follower.hold(HOME_POSITION, start)
            follower.set_trajectory(path_command(path, start + 0.1), start)
            judge = EpisodeJudge(episode, start, timeout=8.0)
            while judge.outcome == Outcome.RUNNING:
                for _ in range(10):
                    scene.set_position_targets(follower.sample(scene.time)[0])
                    scene.step()
                judge.update(scene.time, scene.tool_position(), scene.object_positions())
            assert judge.outcome == Outcome.SUCCESS, (index, judge.outcome)
            assert judge.outcome_time < path.duration + 0.1 + 0.5
            assert math.isfinite(judge.target_distance)
    finally:
        scene.close()
