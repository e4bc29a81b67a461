# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The recorder as a process over real DDS: what is published is what the dataset holds."""
import signal
import time

from builtin_interfaces.msg import Duration
import numpy as np
import pytest
from rclpy.qos import qos_profile_sensor_data, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from pi0_ros.control.follower import TrajectoryCommand, TrajectoryFollower
from pi0_ros.conversions import rgb_to_image, seconds_to_stamp, stamp_to_nanoseconds
from pi0_ros.parameters import SO101_JOINTS
from pi0_ros.qos import LATCHED
from pi0_ros.srv import StartEpisode

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAMERAS = ('front', 'side', 'wrist')
FPS = 30
HELD = np.array([0.1, -0.2, 0.3, -0.4, 0.5, 0.6])  # the arm's joint states, SO101_JOINTS order
GOAL = HELD + [0.3, 0.2, -0.1, 0.4, -0.2, 0.1]
STARTUP_TIMEOUT = 90.0


def rgb_for(i, camera):
    """Return an image whose pixels tell the observation, camera and channel apart."""
    c = CAMERAS.index(camera)
    image = np.zeros((12, 16, 3), np.uint8)
    image[..., 0], image[..., 1], image[..., 2] = (5 * i) % 256, 100 + c, 200 - c
    image[0, 0] = (1, 2, 3)
    return image


class Robot:
    """The test process as the robot: cameras (side in bgr8), joint states, instruction."""

    def __init__(self, ros_node):
        self.ros = ros_node
        node = ros_node.node
        self.images = {name: node.create_publisher(
            type(rgb_to_image(rgb_for(0, name), seconds_to_stamp(0.0), name)),
            f'camera/{name}/image_raw', qos_profile_sensor_data) for name in CAMERAS}
        self.joints = node.create_publisher(JointState, 'joint_states', qos_profile_sensor_data)
        self.instruction = node.create_publisher(String, 'instruction', LATCHED)
        self.trajectory = node.create_publisher(
            JointTrajectory, 'arm_controller/joint_trajectory',
            QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
        self.published = []  # (stamp_ns, i) of each observation sent

    def now(self):
        return self.ros.node.get_clock().now().nanoseconds * 1e-9

    def publish(self, i, cameras=CAMERAS, stamp=None):
        """Publish observation i now: the joint state first (names reversed), then the frames."""
        stamp = stamp or seconds_to_stamp(self.now())
        self.joints.publish(JointState(header=rgb_to_image(rgb_for(0, 'front'), stamp,
                                                           '').header,
                                       name=list(reversed(SO101_JOINTS)),
                                       position=list(reversed(HELD.tolist()))))
        for name in cameras:
            image = rgb_to_image(rgb_for(i, name), stamp, name)
            if name == 'side':  # a BGR camera: the dataset must hold RGB all the same
                image.encoding = 'bgr8'
                image.data = rgb_for(i, name)[..., ::-1].tobytes()
            self.images[name].publish(image)
        self.published.append((stamp_to_nanoseconds(stamp), i))

    def stream(self, first, count, cameras=CAMERAS):
        """Publish `count` observations at FPS (paced on the wall clock)."""
        start = time.monotonic()
        for k in range(count):
            self.publish(first + k, cameras)
            self.ros.spin_for(max(0.0, start + (k + 1) / FPS - time.monotonic()))


def call(ros_node, process, srv_type, name, request):
    client = ros_node.node.create_client(srv_type, name)
    assert ros_node.spin_until(client.service_is_ready, STARTUP_TIMEOUT, process), \
        process.output()[-3000:]
    future = client.call_async(request)
    assert ros_node.spin_until(future.done, 60.0, process), process.output()[-3000:]
    return future.result()


def test_recorded_frames_are_the_published_observations(start_process, ros_node, tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = tmp_path / 'dataset'
    recorder = start_process('pi0_ros.tools.record', name='pi0_recorder', parameters={
        'output': str(root), 'fps': FPS, 'observation_timeout': 0.4, 'repo_id': 'test/rec'})
    robot = Robot(ros_node)
    robot.instruction.publish(String(data='touch the red cube'))
    assert ros_node.spin_until(
        lambda: all(p.get_subscription_count() for p in robot.images.values()),
        STARTUP_TIMEOUT, recorder), recorder.output()[-3000:]
    robot.stream(0, 10)  # before an episode: not recorded

    started = call(ros_node, recorder, StartEpisode, 'pi0_recorder/start_episode',
                   StartEpisode.Request(task=''))
    assert started.success and started.episode_index == 0, started.message
    # The commanded trajectory: from HELD at `begin` to GOAL one second later (linear).
    begin = robot.now() + 0.3
    command = TrajectoryCommand(joint_names=list(reversed(SO101_JOINTS)), stamp=begin,
                                time_from_start=[0.0, 1.0],
                                positions=[list(reversed(HELD)), list(reversed(GOAL))])
    robot.trajectory.publish(JointTrajectory(
        header=rgb_to_image(rgb_for(0, 'front'), seconds_to_stamp(begin), '').header,
        joint_names=command.joint_names, points=[
            JointTrajectoryPoint(positions=p, time_from_start=Duration(sec=int(t)))
            for p, t in zip(command.positions, command.time_from_start)]))
    first = len(robot.published)
    robot.stream(100, 40)
    episode_one = robot.published[first:]
    stopped = call(ros_node, recorder, SetBool, 'pi0_recorder/stop_episode',
                   SetBool.Request(data=True))
    assert stopped.success, stopped.message

    # Episode two: the side camera stops; it is discarded, and the reply says why.
    assert call(ros_node, recorder, StartEpisode, 'pi0_recorder/start_episode',
                StartEpisode.Request(task='touch the green ball')).success
    robot.stream(200, 10)
    robot.stream(210, 25, cameras=('front', 'wrist'))
    lost = call(ros_node, recorder, SetBool, 'pi0_recorder/stop_episode',
                SetBool.Request(data=True))
    assert not lost.success and 'inputs silent: side' in lost.message, lost.message

    # Episode three: Ctrl-C during it; the recorder exits cleanly, the episode is discarded.
    refused = call(ros_node, recorder, StartEpisode, 'pi0_recorder/start_episode',
                   StartEpisode.Request(task='touch the blue cylinder'))
    assert not refused.success and 'inputs silent: side' in refused.message
    robot.stream(290, 10)
    assert call(ros_node, recorder, StartEpisode, 'pi0_recorder/start_episode',
                StartEpisode.Request(task='touch the blue cylinder')).success
    robot.stream(300, 10)
    recorder.send_signal(signal.SIGINT)
    assert recorder.wait(timeout=60.0) == 0, recorder.output()[-3000:]

    dataset = LeRobotDataset('test/rec', root=root)
    assert dataset.num_episodes == 1
    assert dataset.meta.features['observation.state']['names'] == SO101_JOINTS
    sent = dict(episode_one)
    follower = TrajectoryFollower(SO101_JOINTS, HELD)
    follower.hold(HELD, 0.0)
    follower.set_trajectory(command, begin - 0.3)
    previous = None
    frames = dataset.num_frames
    assert frames >= 20, frames  # 40 sent at 30 fps; the first few may precede the start
    repeats = 0
    for row in range(frames):
        item = dataset[row]
        stamp_ns = int(item['stamp_ns'])
        assert stamp_ns in sent  # every frame is a published observation ...
        assert previous is None or stamp_ns >= previous  # ... in order
        repeats += stamp_ns == previous  # a slot that saw no observation repeats the last
        previous = stamp_ns
        i = sent[stamp_ns]
        assert float(item['timestamp']) == pytest.approx(row / FPS)
        assert item['task'] == 'touch the red cube'
        np.testing.assert_allclose(item['observation.state'].numpy(), HELD, rtol=1e-6)
        expected = follower.sample(stamp_ns * 1e-9)[0]
        np.testing.assert_allclose(item['action'].numpy(), expected, atol=1e-5)
        for camera in CAMERAS:
            image = item[f'observation.images.{camera}'].numpy().transpose(1, 2, 0)
            np.testing.assert_array_equal(np.round(image * 255).astype(np.uint8),
                                          rgb_for(i, camera))
    # The stop reply counted the repeats; the last frame is the last observation sent.
    assert f'{frames} frames ({repeats} repeated) saved' in stopped.message
    assert dataset.meta.episodes[0]['length'] == frames
    assert sent[previous] == episode_one[-1][1]
    actions = dataset.hf_dataset['action']
    assert not np.allclose(actions[0], actions[-1])  # the commanded motion is in it


def test_leader_arm_actions_are_its_joint_states(start_process, ros_node, tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = tmp_path / 'teleop'
    recorder = start_process('pi0_ros.tools.record', name='pi0_recorder', parameters={
        'output': str(root), 'fps': FPS, 'action_source': 'leader', 'repo_id': 'test/teleop'})
    robot = Robot(ros_node)
    leader = ros_node.node.create_publisher(JointState, 'leader/joint_states',
                                            qos_profile_sensor_data)
    leader_positions = {}

    def publish_with_leader(i, cameras=CAMERAS):
        # The leader's state at the frames' stamp goes out before them (as the joint state).
        stamp = seconds_to_stamp(robot.now())
        leader_positions[stamp_to_nanoseconds(stamp)] = GOAL + 0.01 * i  # the operator moves
        leader.publish(JointState(
            header=rgb_to_image(rgb_for(0, 'front'), stamp, '').header,
            name=list(reversed(SO101_JOINTS)),
            position=list(reversed(leader_positions[stamp_to_nanoseconds(stamp)].tolist()))))
        Robot.publish(robot, i, cameras, stamp)

    robot.publish = publish_with_leader
    assert ros_node.spin_until(
        lambda: all(p.get_subscription_count() for p in robot.images.values())
        and leader.get_subscription_count(), STARTUP_TIMEOUT, recorder), \
        recorder.output()[-3000:]
    robot.stream(0, 10)
    assert call(ros_node, recorder, StartEpisode, 'pi0_recorder/start_episode',
                StartEpisode.Request(task='teleoperated')).success
    robot.stream(10, 20)
    stopped = call(ros_node, recorder, SetBool, 'pi0_recorder/stop_episode',
                   SetBool.Request(data=True))
    assert stopped.success, stopped.message
    recorder.send_signal(signal.SIGINT)
    assert recorder.wait(timeout=60.0) == 0, recorder.output()[-3000:]

    dataset = LeRobotDataset('test/teleop', root=root)
    assert dataset.num_episodes == 1 and dataset.num_frames >= 10
    stamps = sorted(leader_positions)
    for row in range(dataset.num_frames):
        item = dataset[row]
        # The leader's state at the frame's stamp; where it had not been taken yet when the
        # frames synchronized (two topics, no order between them), the one before, held.
        at = stamps.index(int(item['stamp_ns']))
        action = item['action'].numpy()
        assert any(np.allclose(action, leader_positions[stamps[k]], rtol=1e-6)
                   for k in (at, at - 1)), (action, leader_positions[stamps[at]])
        np.testing.assert_allclose(item['observation.state'].numpy(), HELD, rtol=1e-6)
