# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The MuJoCo scene: loads, holds its pose, tracks targets, renders three cameras."""
import numpy as np
import pytest

from pi0_ros.sim.scene import (
    CAMERA_NAMES, HOME_POSITION, joint_limits, JOINT_NAMES, SimScene)

pytestmark = pytest.mark.sim


@pytest.fixture(scope='module')
def scene():
    scene = SimScene(image_width=80, image_height=60)
    yield scene
    scene.close()


def test_joint_limits_are_the_models_ranges_rounded_inwards(scene):
    limits = joint_limits()
    assert limits.names == JOINT_NAMES
    model_range = np.array([scene.model.joint(name).range for name in JOINT_NAMES])
    lower, upper = np.array(limits.position_lower), np.array(limits.position_upper)
    assert np.all(lower >= model_range[:, 0]) and np.all(lower - model_range[:, 0] < 1e-3)
    assert np.all(upper <= model_range[:, 1]) and np.all(model_range[:, 1] - upper < 1e-3)
    assert np.all(lower < np.array(HOME_POSITION)) and np.all(np.array(HOME_POSITION) < upper)
    assert all(0.5 <= v <= 5.0 for v in limits.max_velocity)
    assert all(v > 0 for v in limits.max_acceleration)


def test_scene_has_three_cameras_six_actuated_joints_and_objects(scene):
    assert [scene.model.camera(i).name for i in range(scene.model.ncam)] == list(CAMERA_NAMES)
    assert scene.model.nu == 6
    assert scene.model.body('table') is not None and scene.model.body('red_cube') is not None
    assert scene.timestep == 0.002


def test_reset_holds_home_and_a_target_is_reached(scene):
    scene.reset()
    scene.step(250)
    np.testing.assert_allclose(scene.joint_positions(), HOME_POSITION, atol=0.05)
    target = np.array(HOME_POSITION) + [0.3, 0.2, -0.2, 0.2, 0.5, 0.4]
    scene.set_position_targets(target)
    scene.step(750)
    np.testing.assert_allclose(scene.joint_positions(), target, atol=0.03)
    assert np.all(np.abs(scene.joint_velocities()) < 0.05)
    elapsed = scene.time
    scene.reset()
    assert scene.time == elapsed > 0.0   # time goes on: /clock and stamps stay monotonic
    np.testing.assert_array_equal(scene.joint_positions(), HOME_POSITION)


def test_targets_are_clipped_to_the_actuator_ranges(scene):
    applied = scene.set_position_targets([10.0, -10.0, 0.0, 0.0, 0.0, 10.0])
    np.testing.assert_array_equal(applied[[0, 1, 5]],
                                  [scene.ctrl_upper[0], scene.ctrl_lower[1], scene.ctrl_upper[5]])
    scene.reset()


def test_three_cameras_render_distinct_rgb_images(scene):
    images = [scene.render(name) for name in CAMERA_NAMES]
    for image in images:
        assert image.shape == (60, 80, 3) and image.dtype == np.uint8
        assert image.std() > 5.0  # not a blank frame
    assert not np.array_equal(images[0], images[1])
    assert not np.array_equal(images[0], images[2])
