# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""A stand-in robot for integration tests: three cameras, joint states and an instruction."""
import cv2
import numpy as np
from rclpy.qos import (DurabilityPolicy, qos_profile_sensor_data, QoSProfile,
                       ReliabilityPolicy)
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String

from pi0_ros.control import validate_trajectory
from pi0_ros.conversions import rgb_to_image, stamp_to_nanoseconds
from pi0_ros.parameters import (SO101_JOINTS, SO101_MAX_VELOCITY, SO101_POSITION_LOWER,
                                SO101_POSITION_UPPER)

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
CAMERAS = ('front', 'side', 'wrist')


def command_problems(msg) -> list:
    """Return what makes a JointTrajectory invalid for joint_trajectory_controller ([]: valid)."""
    if list(msg.joint_names) != SO101_JOINTS:
        return [f'joint names {list(msg.joint_names)}']
    problems = []
    if stamp_to_nanoseconds(msg.header.stamp) <= 0:  # the plan's start on the ROS clock
        problems.append('no header stamp')
    times = np.array([p.time_from_start.sec + p.time_from_start.nanosec * 1e-9
                      for p in msg.points])
    positions = np.array([p.positions for p in msg.points])
    velocities = np.array([p.velocities for p in msg.points])
    problems += validate_trajectory(times, positions, velocities, len(SO101_JOINTS))
    if problems:
        return problems
    if np.any(positions < np.array(SO101_POSITION_LOWER) - 1e-9) \
            or np.any(positions > np.array(SO101_POSITION_UPPER) + 1e-9):
        problems.append('a position outside the joint limits')
    if np.any(np.abs(velocities) > np.array(SO101_MAX_VELOCITY) + 1e-6):
        problems.append('a velocity above the joint limits')
    return problems


def smooth_frames(width: int, height: int) -> dict:
    """Per camera a smooth RGB gradient: a few kB as JPEG (random frames take tens of kB)."""
    x = np.linspace(0, 255, width)[None, :, None]
    y = np.linspace(0, 255, height)[:, None, None]
    return {name: np.broadcast_to((x * (index + 1) / 3 + y / 2 + 40 * np.arange(3)) % 256,
                                  (height, width, 3)).astype(np.uint8)
            for index, name in enumerate(CAMERAS)}


class RobotFeeder:
    """Publishes synchronized camera frames and joint states from timers of a test node.

    Joint positions follow the first point of the latest command, like a stiff controller.
    """

    def __init__(self, node, *, camera_rate=30.0, joint_rate=200.0, width=640, height=480,
                 compressed=(), joint_names=SO101_JOINTS, frames=None):
        self.node = node
        self.joint_names = list(joint_names)
        self.positions = np.zeros(len(self.joint_names))
        self.cameras_on = True
        self.joints_on = True
        self.camera_stamps = []
        self.compressed = set(compressed)
        rng = np.random.default_rng(0)
        self.frames = frames or {name: rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
                                 for name in CAMERAS}
        self.jpegs = {name: cv2.imencode('.jpg', cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))[1]
                      for name, frame in self.frames.items()}
        self.image_pubs = {}
        for name in CAMERAS:
            if name in self.compressed:
                topic, msg_type = f'camera/{name}/image_raw/compressed', CompressedImage
            else:
                topic, msg_type = f'camera/{name}/image_raw', Image
            self.image_pubs[name] = node.create_publisher(msg_type, topic,
                                                          qos_profile_sensor_data)
        self.joint_pub = node.create_publisher(JointState, 'joint_states',
                                               qos_profile_sensor_data)
        self.instruction_pub = node.create_publisher(String, 'instruction', LATCHED)
        node.create_timer(1.0 / camera_rate, self.publish_cameras)
        node.create_timer(1.0 / joint_rate, self.publish_joint_state)

    def image_message(self, name, stamp):
        if name in self.compressed:
            msg = CompressedImage(format='jpeg', data=self.jpegs[name].tobytes())
            msg.header.stamp = stamp
            msg.header.frame_id = name
            return msg
        return rgb_to_image(self.frames[name], stamp, name)

    def publish_cameras(self):
        if not self.cameras_on:
            return
        stamp = self.node.get_clock().now().to_msg()
        self.camera_stamps.append(stamp.sec * 10**9 + stamp.nanosec)
        for name in CAMERAS:
            self.image_pubs[name].publish(self.image_message(name, stamp))

    def publish_joint_state(self):
        if not self.joints_on:
            return
        msg = JointState(name=self.joint_names, position=[float(p) for p in self.positions])
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.joint_pub.publish(msg)

    def follow(self, trajectory):
        """Track the first point of a received JointTrajectory (a perfect position controller)."""
        if trajectory.points:
            index = [trajectory.joint_names.index(n) for n in self.joint_names]
            self.positions = np.asarray(trajectory.points[0].positions)[index]

    def say(self, text):
        self.instruction_pub.publish(String(data=text))
