# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Test helpers: a package executable as a process, and an rclpy node driven by the test."""
import os
from pathlib import Path
import sys
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor

from pi0_ros.tools.processes import Process, ros_args

REPO_ROOT = Path(__file__).resolve().parents[1]


class RosProcess(Process):
    """A Python module (or a script path ending in .py) run as its own process on a ROS domain."""

    def __init__(self, module, *, domain_id, parameters=None, args=(), env=None, log_path):
        target = [str(module)] if str(module).endswith('.py') else ['-m', module]
        command = [sys.executable, *target, *args]
        if parameters:
            command += ros_args(parameters)
        process_env = dict(os.environ, ROS_DOMAIN_ID=str(domain_id), PYTHONUNBUFFERED='1')
        process_env.update(env or {})
        log_path = Path(log_path)
        # Run outside the source tree, so `-m pi0_ros...` imports the installed package (in a
        # colcon install the generated pi0_ros.msg lives there, not in the source).
        super().__init__(log_path.stem, command, process_env, log_path.parent,
                         cwd=log_path.parent)


class RosTestNode:
    """An rclpy context + node + executor on one domain, spun by the test with bounded waits."""

    def __init__(self, domain_id, name='pi0_ros_test'):
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def spin_until(self, predicate, timeout, process=None):
        """Spin until predicate() is true; False on timeout or if `process` exited meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            if process is not None and process.returncode is not None:
                return bool(predicate())
            self.executor.spin_once(timeout_sec=0.05)
        return bool(predicate())

    def spin_for(self, duration):
        """Spin for a fixed time (collecting messages), not as synchronization."""
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=min(0.05, max(0.0, deadline - time.monotonic())))

    def collect(self, msg_type, topic, qos=10):
        """Subscribe and return the list that receives (receive_time, message) pairs."""
        received = []
        self.node.create_subscription(
            msg_type, topic, lambda msg: received.append((time.monotonic(), msg)), qos)
        return received

    def close(self):
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()
