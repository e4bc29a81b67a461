# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Test helpers: a package executable as a process, and an rclpy node driven by the test."""
import os
from pathlib import Path
import signal
import subprocess
import sys
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor

REPO_ROOT = Path(__file__).resolve().parents[1]


def format_parameter(value):
    """Format a Python value as a `--ros-args -p name:=value` literal (YAML)."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (list, tuple)):
        return '[' + ', '.join(format_parameter(v) for v in value) + ']'
    return repr(value)


class RosProcess:
    """A Python module (or a script path ending in .py) run as its own process on a ROS domain."""

    def __init__(self, module, *, domain_id, parameters=None, args=(), env=None, log_path):
        target = [str(module)] if str(module).endswith('.py') else ['-m', module]
        command = [sys.executable, *target, *args]
        if parameters:
            command.append('--ros-args')
            for key, value in parameters.items():
                command += ['-p', f'{key}:={format_parameter(value)}']
        process_env = dict(os.environ, ROS_DOMAIN_ID=str(domain_id), PYTHONUNBUFFERED='1')
        process_env.update(env or {})
        self.log_path = Path(log_path)
        self._log = open(self.log_path, 'wb')
        self.command = command
        # Run outside the source tree, so `-m pi0_ros...` imports the installed package (in a
        # colcon install the generated pi0_ros.msg lives there, not in the source).
        self.popen = subprocess.Popen(command, cwd=self.log_path.parent, env=process_env,
                                      stdout=self._log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)

    @property
    def returncode(self):
        return self.popen.poll()

    def output(self):
        """Return everything the process printed so far."""
        self._log.flush()
        return self.log_path.read_text(errors='replace')

    def send_signal(self, sig):
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def wait(self, timeout):
        """Wait for exit; return the exit code (raises subprocess.TimeoutExpired)."""
        return self.popen.wait(timeout=timeout)

    def stop(self, timeout=15.0):
        """Stop with SIGINT, escalating to SIGKILL of the process group; return the exit code."""
        try:
            if self.popen.poll() is None:
                self.popen.send_signal(signal.SIGINT)
                try:
                    self.popen.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                    self.popen.wait(timeout=timeout)
            else:
                # The process exited; make sure nothing it started outlives it.
                try:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        finally:
            self._log.close()
        return self.popen.returncode


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
