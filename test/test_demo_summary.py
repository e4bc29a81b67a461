# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The demo report's numbers from a recorded run (no ROS: a recorder filled by hand)."""
import json
import time
from types import SimpleNamespace

import numpy as np

from pi0_ros.msg import PolicyStatus
from pi0_ros.sim.scene import joint_limits
from pi0_ros.tools.demo import Recorder, summarize

LIMITS = joint_limits()
JOINTS = len(LIMITS.position_lower)


def recorded(points_by_time, latencies=(), to_command=()):
    """Return a recorder with one command per (time, positions [P, J], velocities [P, J])."""
    return SimpleNamespace(
        command_times=[t for t, _, _ in points_by_time],
        commands=[(t, q[0]) for t, q, _ in points_by_time],
        command_points=list(points_by_time),
        measured=[(t, q[0]) for t, q, _ in points_by_time],
        latencies_ms=list(latencies), observation_to_command_ms=list(to_command),
        statuses=[], status_times=[], non_finite_commands=0, invalid_commands=0)


def test_every_point_and_velocity_of_a_command_is_checked_against_the_limits():
    inside = np.zeros((10, JOINTS))
    beyond = inside.copy()
    beyond[1, 0] = LIMITS.position_upper[0] + 1.0          # the second point, not the first
    fast = inside.copy()
    fast[3, 2] = LIMITS.max_velocity[2] * 2.0
    recorder = recorded([(1.0, inside, inside), (1.02, beyond, inside), (1.04, inside, fast),
                         (1.06, inside, inside)])
    assert summarize(recorder, LIMITS, 50.0, (0.0, 2.0))['commands_out_of_limits'] == 2


def test_latencies_are_taken_from_the_measured_window_only():
    still = np.zeros((10, JOINTS))
    recorder = recorded([(10.0, still, still), (10.02, still, still)],
                        latencies=[(5.0, 900.0), (10.01, 30.0), (10.03, 40.0)],
                        to_command=[(5.0, 1500.0), (10.01, 60.0)])
    summary = summarize(recorder, LIMITS, 50.0, (10.0, 11.0))
    assert summary['inference_latency_ms']['count'] == 2         # the start-up one left out
    assert summary['inference_latency_ms']['p99'] < 41.0
    assert summary['observation_to_first_command_ms']['p99'] == 60.0


def test_commands_before_the_measured_window_are_checked_against_the_limits_too():
    # The window starts when the node reports following; the first chunk's hand-over and the
    # holds before it are commands the controller executed as well.
    inside = np.zeros((10, JOINTS))
    beyond = inside.copy()
    beyond[0, 0] = LIMITS.position_upper[0] + 0.5
    recorder = recorded([(1.0, beyond, inside), (5.0, inside, inside), (5.02, inside, inside)])
    summary = summarize(recorder, LIMITS, 50.0, (4.0, 6.0))
    assert summary['commands'] == 2 and summary['commands_out_of_limits'] == 1


class FakeNode:
    """What the demo's Recorder asks of a node: subscriptions (kept by topic) and a clock."""

    def __init__(self):
        self.callbacks = {}

    def create_subscription(self, msg_type, topic, callback, qos):
        self.callbacks[topic] = callback

    def create_publisher(self, *args):
        return SimpleNamespace(publish=lambda msg: None)

    def get_clock(self):
        return SimpleNamespace(now=lambda: SimpleNamespace(nanoseconds=time.time_ns()))

    def destroy_node(self):
        pass


def test_a_malformed_trajectory_is_counted_as_invalid_not_a_crash():
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    recorder = Recorder(FakeNode(), LIMITS.names)
    ragged = JointTrajectory(joint_names=list(LIMITS.names), points=[
        JointTrajectoryPoint(positions=[0.0] * JOINTS), JointTrajectoryPoint(positions=[0.0])])
    unknown = JointTrajectory(joint_names=['elbow'],
                              points=[JointTrajectoryPoint(positions=[0.0])])
    for msg in (ragged, unknown):
        recorder.trajectory_callback(msg)
    assert recorder.invalid_commands == 2 and recorder.command_points == []


def test_an_interrupted_demo_reports_what_it_recorded(tmp_path, monkeypatch):
    # Ctrl-C in the measured run: the report covers the run so far (it was empty, with a false
    # "no trajectory commands" failure).
    import rclpy
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    import pi0_ros.tools.demo as demo

    node = FakeNode()
    started = []

    def spin_once(spun, timeout_sec):
        time.sleep(0.01)
        node.callbacks['pi0_ros/status'](SimpleNamespace(
            output_state=1, hold_reason='', control_rate_hz=50.0, chunks_produced=1,
            actions_skipped=0, observations_synced=1, observations_dropped=0, inputs_rejected=0,
            engine_detail='', inference_latency_p50_ms=1.0, observation_age_s=0.0,
            vision_cache_hits=0))
        node.callbacks['arm_controller/joint_trajectory'](JointTrajectory(
            joint_names=list(LIMITS.names),
            points=[JointTrajectoryPoint(positions=[0.0] * JOINTS, velocities=[0.0] * JOINTS)]))
        started.append(time.monotonic())
        if started[-1] - started[0] > 0.5:
            raise KeyboardInterrupt

    class FakeProcess:
        def __init__(self, name, *args):
            self.name = name

        def alive(self):
            return True

        def stop(self):
            return -2

        def tail(self):
            return ''

    monkeypatch.setattr(demo, 'Process', FakeProcess)
    monkeypatch.setattr(rclpy, 'init', lambda *args, **kwargs: None)
    monkeypatch.setattr(rclpy, 'create_node', lambda name: node)
    monkeypatch.setattr(rclpy, 'spin_once', spin_once)
    monkeypatch.setattr(rclpy, 'try_shutdown', lambda: None)
    demo.main(['--duration', '30', '--output', str(tmp_path), '--fastdds-profile', 'none'])
    summary = json.loads((tmp_path / 'summary.json').read_text())
    assert 'interrupted' in summary['failures']
    assert 'no trajectory commands were received' not in summary['failures']
    assert summary['commands'] > 10 and summary['duration_s'] > 0.3


def test_the_following_fraction_counts_the_statuses_inside_the_window():
    still = np.zeros((10, JOINTS))
    recorder = recorded([(10.0, still, still), (10.02, still, still)])
    states = [(5.0, PolicyStatus.OUTPUT_HOLDING), (10.0, PolicyStatus.OUTPUT_FOLLOWING),
              (10.2, PolicyStatus.OUTPUT_HOLDING), (10.4, PolicyStatus.OUTPUT_FOLLOWING),
              (10.6, PolicyStatus.OUTPUT_FOLLOWING)]
    recorder.status_times = [t for t, _ in states]
    recorder.statuses = [PolicyStatus(output_state=state) for _, state in states]
    assert summarize(recorder, LIMITS, 50.0, (10.0, 11.0))['following_fraction'] == 0.75
    recorder.status_times, recorder.statuses = [], []
    assert summarize(recorder, LIMITS, 50.0, (10.0, 11.0))['following_fraction'] is None
