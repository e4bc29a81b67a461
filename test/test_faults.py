# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Fault injection over real DDS: the node as a process, its faults switched by the test.

Each test asserts the safe behaviour the fault calls for, and that every command the node
published meanwhile is valid for the joint_trajectory_controller and inside the limits.
"""
import os
from pathlib import Path
import signal
import subprocess
import time

from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
import numpy as np
import pytest
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_srvs.srv import SetBool
from test_node_integration import check_command, NODE_PARAMETERS
from trajectory_msgs.msg import JointTrajectory

from feeder import RobotFeeder
from pi0_ros.conversions import seconds_to_stamp, stamp_to_seconds
from pi0_ros.msg import ActionChunk, PolicyStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAULTY_NODE = Path(__file__).with_name('faulty_node.py')
# Smaller frames than a real camera: the faults do not depend on the size, CI time does.
IMAGE_WIDTH, IMAGE_HEIGHT = 320, 240


class SimClockFeeder(RobotFeeder):
    """A RobotFeeder that stamps with a simulated clock it also publishes on /clock."""

    def __init__(self, node, **kwargs):
        self.sim_offset = 1000.0 - time.monotonic()
        super().__init__(node, **kwargs)
        self.clock_pub = node.create_publisher(Clock, '/clock',
                                               QoSProfile(depth=10,
                                                          reliability=ReliabilityPolicy.RELIABLE))
        node.create_timer(0.005, self.publish_clock)

    def sim_now(self):
        return seconds_to_stamp(time.monotonic() + self.sim_offset)

    def jump(self, seconds):
        """Move the simulated clock by `seconds` (negative: backwards)."""
        self.sim_offset += seconds

    def publish_clock(self):
        self.clock_pub.publish(Clock(clock=self.sim_now()))

    def publish_cameras(self):
        if not self.cameras_on:
            return
        stamp = self.sim_now()
        for name, publisher in self.image_pubs.items():
            publisher.publish(self.image_message(name, stamp))

    def publish_joint_state(self):
        if not self.joints_on:
            return
        msg = JointState(name=self.joint_names, position=[float(p) for p in self.positions])
        msg.header.stamp = self.sim_now()
        self.joint_pub.publish(msg)


class FaultHarness:
    """The faulty node as a process, fed by a stand-in robot; records what it publishes."""

    def __init__(self, start_process, ros_node, tmp_path, parameters=None,
                 feeder_class=RobotFeeder):
        self.ros = ros_node
        node = ros_node.node
        self.fault_file = tmp_path / 'fault'
        self.set_fault('ok')
        self.process = start_process(FAULTY_NODE,
                                     parameters={**NODE_PARAMETERS, **(parameters or {})},
                                     env={'PI0_ROS_FAULT_FILE': str(self.fault_file)})
        self.feeder = feeder_class(node, width=IMAGE_WIDTH, height=IMAGE_HEIGHT)
        self.trajectories = ros_node.collect(JointTrajectory, 'joint_trajectory', 10)
        self.chunks = ros_node.collect(ActionChunk, 'pi0_ros/action_chunk', 10)
        self.statuses = ros_node.collect(PolicyStatus, 'pi0_ros/status', 10)
        node.create_subscription(JointTrajectory, 'joint_trajectory', self.feeder.follow, 10)
        self.feeder.say('pick up the red cube')

    def set_fault(self, mode):
        self.fault_file.write_text(mode)

    def status(self):
        return self.statuses[-1][1] if self.statuses else None

    def wait_status(self, predicate, timeout, what):
        """Spin until the latest status satisfies predicate; fail with the node's log."""
        ok = self.ros.spin_until(lambda: self.statuses and predicate(self.status()), timeout,
                                 process=self.process)
        assert ok, f'{what} within {timeout} s (last status: {self.status()})\n' \
            + self.process.output()[-3000:]
        return self.status()

    def wait_following(self, timeout=90.0):
        return self.wait_status(lambda s: s.output_state == PolicyStatus.OUTPUT_FOLLOWING,
                                timeout, 'never followed the policy')

    def wait_holding(self, reason, timeout):
        """Wait for a hold for `reason` (or any of a tuple of reasons)."""
        reasons = (reason,) if isinstance(reason, str) else tuple(reason)
        return self.wait_status(lambda s: s.output_state == PolicyStatus.OUTPUT_HOLDING
                                and s.hold_reason in reasons, timeout, f'no hold {reasons}')

    def call(self, srv_type, name, request, timeout=10.0):
        client = self.ros.node.create_client(srv_type, name)
        assert client.wait_for_service(timeout_sec=timeout), f'no service {name}'
        future = client.call_async(request)
        assert self.ros.spin_until(future.done, timeout, self.process), f'{name} timed out'
        return future.result()

    def enable(self, on=True):
        assert self.call(SetBool, 'pi0_ros/enable', SetBool.Request(data=on)).success

    def check_all_commands(self):
        """Every command received so far is valid and inside the limits; return the count."""
        assert self.trajectories, 'no command was published'
        for _, msg in self.trajectories:
            check_command(msg)
        return len(self.trajectories)

    def commands_since(self, t):
        return [msg for received, msg in self.trajectories if received > t]


def at_rest(msg):
    """Return whether the command holds one position (all points equal, velocities zero)."""
    first = np.array(msg.points[0].positions)
    return all(np.array_equal(np.array(p.positions), first) and not any(p.velocities)
               for p in msg.points)


@pytest.fixture
def faulty(start_process, ros_node, tmp_path):
    harness = FaultHarness(start_process, ros_node, tmp_path)
    harness.wait_following()
    yield harness
    harness.check_all_commands()


def test_camera_and_joint_state_streams_stop_and_resume(faulty):
    ros = faulty.ros
    # A camera stops: hold on the stale observation, then follow again when it resumes.
    faulty.feeder.cameras_on = False
    faulty.wait_holding('observation stale', 3.0)
    ros.spin_for(1.0)
    assert at_rest(faulty.trajectories[-1][1])
    faulty.feeder.cameras_on = True
    faulty.wait_following(10.0)
    # Joint states stop: hold at once (nothing known about the arm), commands keep coming.
    faulty.feeder.joints_on = False
    faulty.wait_holding('joint states stale', 3.0)
    holding = time.monotonic()
    ros.spin_for(1.5)
    held = faulty.commands_since(holding)
    assert held, 'the node must keep commanding the hold'
    # Counted by the node's stamps (the tick that planned each command), not by when this busy
    # process received them: at 50 Hz, 35 ticks or more in one second of the node's clock (a
    # fresh-clone run on 2 cores, one kept busy, saw 38: this asserts that the hold goes on;
    # test_node_integration checks the rate).
    stamps = np.array([stamp_to_seconds(msg.header.stamp) for msg in held])
    in_second = np.count_nonzero((stamps >= stamps[0]) & (stamps < stamps[0] + 1.0))
    assert in_second >= 35, 'the node must keep commanding the hold'
    assert all(at_rest(msg) for msg in held[-10:])
    faulty.feeder.joints_on = True
    faulty.wait_following(10.0)


def test_engine_failures_reach_failed_then_recover_with_enable(faulty):
    for mode, error in (('raise', 'RuntimeError'), ('oom', 'OutOfMemoryError')):
        faulty.set_fault(mode)
        status = faulty.wait_status(lambda s: s.engine_state == PolicyStatus.ENGINE_FAILED,
                                    15.0, f'{mode}: engine never FAILED')
        assert error in status.engine_detail
        failed_at = time.monotonic()
        faulty.wait_holding('engine failed', 3.0)
        # FAILED is latched: the fault is gone but only ~/enable(true) recovers.
        faulty.set_fault('ok')
        faulty.ros.spin_for(1.0)
        assert faulty.status().engine_state == PolicyStatus.ENGINE_FAILED
        assert len(faulty.commands_since(failed_at)) >= 20, 'hold commands must continue'
        assert at_rest(faulty.trajectories[-1][1])
        faulty.enable(True)
        status = faulty.wait_following(15.0)
        assert status.engine_state != PolicyStatus.ENGINE_FAILED
        assert status.engine_detail == ''
    log = faulty.process.output()
    assert 'worker FAILED' in log and 'engine failure state cleared' in log


def test_non_finite_actions_are_rejected_and_the_arm_holds(faulty):
    before = faulty.status().chunks_discarded
    faulty.set_fault('nan')
    nan_since = time.monotonic()
    # The last good chunk runs out (50 actions at 30 Hz), then the arm holds; if a stale-input
    # hold had already dropped it, the planner holds waiting for a (valid) chunk instead.
    holding = ('chunk exhausted', 'waiting for chunk')
    faulty.wait_holding(holding, 10.0)
    # Every non-finite chunk is discarded, and the arm keeps holding while they keep coming (a
    # stale-input hold may have come first: then fewer chunks were discarded by the time of the
    # hold, so the count is waited for, not read once).
    faulty.wait_status(lambda s: s.chunks_discarded >= before + 3, 10.0,
                       'non-finite chunks were not discarded')
    faulty.wait_status(lambda s: s.output_state == PolicyStatus.OUTPUT_HOLDING, 1.0,
                       'the arm did not hold while non-finite chunks came')
    assert 'non-finite' in faulty.process.output()
    for msg in faulty.commands_since(nan_since):
        assert np.all(np.isfinite([p.positions for p in msg.points]))
    for _, chunk in faulty.chunks:
        assert np.all(np.isfinite(chunk.actions)), 'a non-finite chunk was published'
    faulty.set_fault('ok')
    faulty.wait_following(10.0)


def test_instruction_change_mid_chunk_discards_the_old_epoch(faulty):
    ros = faulty.ros
    faulty.set_fault('slow')
    # Wait for a slow chunk; the next inference (1.5 s longer) starts right after it.
    count = len(faulty.chunks)
    assert ros.spin_until(lambda: len(faulty.chunks) > count + 1, 20.0, faulty.process), \
        'no slow chunks\n' + faulty.process.output()[-3000:]
    old_epoch = faulty.chunks[-1][1].instruction_epoch
    discarded = faulty.status().chunks_discarded
    ros.spin_for(0.3)
    faulty.feeder.say('put the cube in the bowl')
    changed = time.monotonic()
    assert ros.spin_until(lambda: faulty.chunks[-1][1].instruction_epoch > old_epoch, 20.0,
                          faulty.process), 'no chunk for the new instruction\n' \
        + faulty.process.output()[-3000:]
    # The inference in flight when the instruction changed finished meanwhile: discarded.
    faulty.wait_status(lambda s: s.chunks_discarded > discarded, 5.0, 'no chunk discarded')
    epochs = [(round(t - changed, 3), c.instruction_epoch) for t, c in faulty.chunks]
    first_new = next(i for i, (_, epoch) in enumerate(epochs) if epoch > old_epoch)
    assert all(epoch > old_epoch for _, epoch in epochs[first_new:]), epochs
    # The in-flight result would arrive about 1.2 s after the change; the node has the new
    # instruction long before (1 s of margin for a loaded machine).
    assert not [t for t, epoch in epochs if t > 1.0 and epoch == old_epoch], epochs
    faulty.set_fault('ok')


def test_clock_jump_backwards_keeps_commands_valid_and_recovers(start_process, ros_node,
                                                                tmp_path):
    harness = FaultHarness(start_process, ros_node, tmp_path,
                           parameters={'use_sim_time': True}, feeder_class=SimClockFeeder)
    harness.wait_following()
    harness.ros.spin_for(1.0)
    newest_stamp = max(stamp_to_seconds(c.header.stamp) for _, c in harness.chunks)
    harness.feeder.jump(-5.0)
    jumped = time.monotonic()
    harness.ros.spin_for(1.0)
    assert len(harness.commands_since(jumped + 0.5)) >= 10, 'commands stopped after the jump'
    # The node recovers on the new time base (well before it passes the pre-jump time):
    # chunks stamped after the jump, and following again.
    assert harness.ros.spin_until(
        lambda: any(stamp_to_seconds(c.header.stamp) < newest_stamp - 2.0
                    for _, c in harness.chunks), 4.0, harness.process), \
        'no chunk on the new time base\n' + harness.process.output()[-3000:]
    harness.wait_following(2.0)
    assert 'clock jumped back by' in harness.process.output()
    harness.check_all_commands()


def test_deactivate_brakes_and_activate_resumes_under_load(faulty):
    ros = faulty.ros
    ros.spin_for(1.0)
    response = faulty.call(ChangeState, 'pi0_ros/change_state', ChangeState.Request(
        transition=Transition(id=Transition.TRANSITION_DEACTIVATE)))
    assert response.success
    deactivated = time.monotonic()
    ros.spin_for(1.5)
    state = faulty.call(GetState, 'pi0_ros/get_state', GetState.Request())
    assert state.current_state.label == 'inactive'
    before = [msg for t, msg in faulty.trajectories if t <= deactivated + 0.1]
    brake = before[-1]
    check_command(brake)
    assert not any(brake.points[-1].velocities), 'the braking command must end at rest'
    # Nothing after the braking command while inactive (the feeder keeps everything coming).
    assert [t for t, _ in faulty.trajectories if t > deactivated + 0.1] == []
    # Status (and diagnostics) keep reporting while inactive, with no output rate.
    inactive = [msg for t, msg in faulty.statuses if t > deactivated + 0.3]
    assert inactive and all(msg.lifecycle_state == 'inactive' for msg in inactive)
    assert inactive[-1].control_rate_hz == 0.0
    response = faulty.call(ChangeState, 'pi0_ros/change_state', ChangeState.Request(
        transition=Transition(id=Transition.TRANSITION_ACTIVATE)))
    assert response.success
    activated = time.monotonic()
    faulty.wait_status(lambda s: s.lifecycle_state == 'active'
                       and s.output_state == PolicyStatus.OUTPUT_FOLLOWING, 10.0,
                       'did not follow again after activate')
    ros.spin_for(1.0)
    assert len(faulty.commands_since(activated)) >= 40


def test_sigterm_while_the_engine_loads_exits_at_once(start_process, tmp_path):
    # A checkpoint can take minutes to load; docker stop / systemd send SIGTERM and wait a
    # few seconds before SIGKILL.
    process = start_process(FAULTY_NODE, parameters=NODE_PARAMETERS,
                            env={'PI0_ROS_FAULT_FILE': str(tmp_path / 'fault'),
                                 'PI0_ROS_BUILD_DELAY': '60'})
    deadline = time.monotonic() + 30.0
    while 'loading the engine' not in process.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert 'loading the engine' in process.output(), process.output()[-3000:]
    time.sleep(1.0)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=10.0)
    except subprocess.TimeoutExpired:
        pytest.fail('the node did not exit within 10 s:\n' + process.output()[-3000:])
    assert time.monotonic() - sent < 5.0
    assert code == 0, process.output()[-3000:]


@pytest.mark.parametrize('signal_number', [signal.SIGINT, signal.SIGTERM],
                         ids=['SIGINT', 'SIGTERM'])
def test_signal_during_inference_exits_cleanly(faulty, signal_number):
    faulty.set_fault('slow')
    count = len(faulty.chunks)
    assert faulty.ros.spin_until(lambda: len(faulty.chunks) > count, 20.0, faulty.process)
    faulty.ros.spin_for(0.5)   # the next (slow) inference is in flight
    process = faulty.process
    sent = time.monotonic()
    process.send_signal(signal_number)
    try:
        code = process.wait(timeout=8.0)
    except subprocess.TimeoutExpired:
        pytest.fail('the node did not exit within 8 s:\n' + process.output()[-3000:])
    took = time.monotonic() - sent
    assert code == 0, process.output()[-3000:]
    assert took < 5.0, f'exit took {took:.1f} s'
    with pytest.raises(ProcessLookupError):
        os.killpg(process.popen.pid, 0)   # no process of its group is left
