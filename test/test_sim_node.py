# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The simulator node as a process over real DDS: cameras, joint_states rate, trajectories."""
from builtin_interfaces.msg import Duration
import numpy as np
import pytest
from rclpy.qos import qos_profile_sensor_data, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from pi0_ros.sim.scene import HOME_POSITION, JOINT_NAMES

pytestmark = [pytest.mark.integration, pytest.mark.sim]

CAMERAS = ('front', 'side', 'wrist')
STARTUP_TIMEOUT = 60.0


@pytest.fixture
def sim(start_process):
    process = start_process('pi0_ros.sim.node', name='pi0_sim', parameters={
        'image_width': 96, 'image_height': 64, 'camera_rate': 5.0, 'joint_state_rate': 200.0})
    yield process
    # start_process stops it at teardown (SIGINT, then SIGKILL, always waited).
    assert process.stop() == 0, process.output()[-3000:]


def test_cameras_joint_states_and_trajectory(sim, ros_node):
    images = {name: ros_node.collect(Image, f'camera/{name}/image_raw', qos_profile_sensor_data)
              for name in CAMERAS}
    # Best effort like the publisher, but deep: the test must not drop what it counts.
    states = ros_node.collect(JointState, 'joint_states', QoSProfile(
        depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT))

    assert ros_node.spin_until(lambda: all(len(images[n]) >= 2 for n in CAMERAS)
                               and len(states) >= 10, STARTUP_TIMEOUT, sim), sim.output()[-3000:]
    for name in CAMERAS:
        _, image = images[name][-1]
        assert (image.width, image.height, image.encoding) == (96, 64, 'rgb8')
        assert image.step == 96 * 3 and len(image.data) == 96 * 64 * 3
        assert image.header.frame_id == name
        assert image.header.stamp.sec > 0
    _, state = states[-1]
    assert list(state.name) == list(JOINT_NAMES)
    assert len(state.position) == 6 and len(state.velocity) == 6
    np.testing.assert_allclose(state.position, HOME_POSITION, atol=0.05)

    # Rate over the message stamps (the node's clock), about 2 s of messages.
    first = len(states)
    assert ros_node.spin_until(lambda: len(states) >= first + 400, 20.0, sim)
    stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for _, m in states[first:]]
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    assert rate >= 100.0, f'joint_states at {rate:.1f} Hz'

    target = [0.3, -0.8, 0.9, 0.5, 0.4, 1.0]
    publisher = ros_node.node.create_publisher(
        JointTrajectory, 'arm_controller/joint_trajectory',
        QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE))
    assert ros_node.spin_until(lambda: publisher.get_subscription_count() > 0, 10.0, sim)
    trajectory = JointTrajectory(joint_names=list(reversed(JOINT_NAMES)))  # any order
    trajectory.points = [JointTrajectoryPoint(positions=list(reversed(target)),
                                              time_from_start=Duration(sec=1))]
    publisher.publish(trajectory)

    def at_target():
        return bool(states) and np.allclose(states[-1][1].position, target, atol=0.03)

    assert ros_node.spin_until(at_target, 15.0, sim), states[-1][1].position

    client = ros_node.node.create_client(Trigger, 'pi0_sim/reset')
    assert ros_node.spin_until(client.service_is_ready, 10.0, sim)
    future = client.call_async(Trigger.Request())
    assert ros_node.spin_until(future.done, 10.0, sim)
    assert future.result().success

    def at_home():
        return np.allclose(states[-1][1].position, HOME_POSITION, atol=0.03)

    assert ros_node.spin_until(at_home, 10.0, sim), states[-1][1].position


def test_a_real_time_factor_without_sim_time_is_refused(start_process):
    # On the wall clock, trajectories and stamps would run 1 / factor as fast as the physics.
    process = start_process('pi0_ros.sim.node', name='pi0_sim_rtf', parameters={
        'image_width': 96, 'image_height': 64, 'real_time_factor': 0.5})
    assert process.wait(timeout=60.0) == 1
    assert 'real_time_factor 0.5 needs publish_clock and use_sim_time' in process.output()
