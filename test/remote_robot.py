# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
One side of test_remote_robot's link, as a process: writes what it receives as JSON lines.

  --role robot    the robot PC: three JPEG cameras, joint states that follow the commands, the
                  instruction; records the commands and statuses that cross the link
  --role monitor  next to the policy node: records its commands and statuses where they leave it

Each line: {"t": monotonic s, "kind": "command", "stamp": s, "problems": [...], "at_rest": bool,
"last": positions} or {"t", "kind": "status", "output_state", "hold_reason", "chunks"}.
Runs until SIGINT or SIGTERM.
"""
import argparse
import json
import signal
import sys
import time

import rclpy
from rclpy.executors import ExternalShutdownException
from trajectory_msgs.msg import JointTrajectory

from feeder import CAMERAS, command_problems, RobotFeeder, smooth_frames
from pi0_ros.conversions import stamp_to_nanoseconds
from pi0_ros.msg import PolicyStatus


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--role', choices=('robot', 'monitor'), required=True)
    parser.add_argument('--record', required=True, help='JSON lines file to write')
    parser.add_argument('--instruction', default='pick up the red cube')
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: rclpy.try_shutdown())
    rclpy.init(args=[])
    node = rclpy.create_node(f'remote_{args.role}')
    record = open(args.record, 'w', buffering=1)  # noqa: SIM115 - closed at exit

    def write(**fields):
        record.write(json.dumps({'t': time.monotonic(), **fields}) + '\n')

    feeder = (RobotFeeder(node, width=320, height=240, compressed=CAMERAS,
                          frames=smooth_frames(320, 240)) if args.role == 'robot' else None)

    def on_command(msg):
        if feeder is not None:
            feeder.follow(msg)
        write(kind='command', stamp=stamp_to_nanoseconds(msg.header.stamp) * 1e-9,
              problems=command_problems(msg),
              at_rest=all(v == 0.0 for point in msg.points for v in point.velocities),
              last=list(msg.points[-1].positions) if msg.points else [])

    def on_status(msg):
        write(kind='status', output_state=msg.output_state, hold_reason=msg.hold_reason,
              chunks=msg.chunks_produced)

    node.create_subscription(JointTrajectory, 'joint_trajectory', on_command, 50)
    node.create_subscription(PolicyStatus, 'pi0_ros/status', on_status, 10)
    if feeder is not None:
        feeder.say(args.instruction)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        record.close()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
