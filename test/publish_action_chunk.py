# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Publish a fully populated pi0_ros/ActionChunk until stopped (the far side of a DDS test)."""
import sys

import rclpy
from rclpy.executors import SingleThreadedExecutor

from pi0_ros.executors import spin_until_shutdown
from pi0_ros.msg import ActionChunk

TOPIC = 'dds_roundtrip/action_chunk'


def build_reference_chunk():
    """Return an ActionChunk whose every field holds a distinctive value."""
    msg = ActionChunk()
    msg.header.stamp.sec = 1_700_000_123
    msg.header.stamp.nanosec = 456_789_012
    msg.header.frame_id = 'front_camera'
    msg.joint_names = ['shoulder_pan', 'shoulder_lift', 'elbow_flex', 'gripper']
    msg.dt = 0.02
    msg.horizon = 3
    msg.actions = [0.25 * i - 1.0 for i in range(3 * 4)]
    msg.sequence = 2**40 + 7
    msg.instruction_epoch = 11
    msg.preprocess_ms = 0.5
    msg.vision_ms = 1.25
    msg.prefix_ms = 2.75
    msg.denoise_ms = 4.125
    msg.total_ms = 8.625
    msg.vision_cache_hits = 2
    return msg


def main():
    rclpy.init()
    node = rclpy.create_node('action_chunk_publisher')
    publisher = node.create_publisher(ActionChunk, TOPIC, 10)
    chunk = build_reference_chunk()
    node.create_timer(0.05, lambda: publisher.publish(chunk))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        # As the node does: a SIGINT between two waits can surface as an RCLError (invalid
        # context) rather than ExternalShutdownException; that is a clean stop too.
        spin_until_shutdown(executor)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
