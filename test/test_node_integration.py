# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""The control node as a process, fed over real DDS by a stand-in robot (3 cameras, joints)."""
import os
import time

from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
import numpy as np
import psutil
import pytest
from rcl_interfaces.srv import SetParameters
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Bool, String
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory

from feeder import command_problems, LATCHED, RobotFeeder
from pi0_ros.control import Chunk
from pi0_ros.conversions import stamp_to_nanoseconds
from pi0_ros.msg import ActionChunk, PolicyStatus
from pi0_ros.parameters import SO101_JOINTS, SO101_POSITION_LOWER

pytestmark = pytest.mark.integration

CONTROL_RATE = 50.0
NODE_PARAMETERS = {'device': 'cpu', 'control_rate': CONTROL_RATE, 'observation_timeout': 0.5,
                   'status_rate': 5.0}


class ControlNodeHarness:
    """Starts the node, feeds it, and records everything it publishes."""

    def __init__(self, start_process, ros_node, parameters=None, compressed=()):
        self.ros = ros_node
        node = ros_node.node
        self.process = start_process('pi0_ros.node',
                                     parameters={**NODE_PARAMETERS, **(parameters or {})})
        # 320x240, as test_faults: with Fast DDS's default transports and a busy core, 640x480
        # sets reached the node so rarely that it held for a stale observation for 8-10 s in
        # fresh-clone runs (4 of 453 sets synchronized; docs/reliability.md).
        self.feeder = RobotFeeder(node, width=320, height=240, compressed=compressed)
        # Deep queue: the test process is busy publishing frames; no command may be lost here.
        self.trajectories = ros_node.collect(JointTrajectory, 'joint_trajectory', 200)
        self.chunks = ros_node.collect(ActionChunk, 'pi0_ros/action_chunk', 10)
        self.statuses = ros_node.collect(PolicyStatus, 'pi0_ros/status', 10)
        self.diagnostics = ros_node.collect(DiagnosticArray, '/diagnostics', 10)
        node.create_subscription(JointTrajectory, 'joint_trajectory', self.feeder.follow, 10)

    def wait_following(self, timeout=90.0):
        """Wait until the node is active and follows the policy; fail with its log otherwise."""
        ok = self.ros.spin_until(
            lambda: self.statuses and self.statuses[-1][1].output_state
            == PolicyStatus.OUTPUT_FOLLOWING, timeout, process=self.process)
        assert ok, 'node never followed the policy:\n' + self.report()

    def latest_status(self):
        return self.statuses[-1][1]

    def report(self):
        """Return what the node last said about itself and its log, for a failure message."""
        lines = []
        if self.statuses:
            received, status = self.statuses[-1]
            lines.append(f'status {time.monotonic() - received:.2f} s ago: ' + ', '.join(
                f'{name} {getattr(status, name)}' for name in (
                    'lifecycle_state', 'engine_state', 'engine_detail', 'output_state',
                    'hold_reason', 'observation_age_s', 'control_rate_hz', 'chunks_produced',
                    'chunks_discarded', 'observations_synced', 'observations_dropped',
                    'actions_skipped', 'inputs_rejected')))
        for received, array in self.diagnostics[-1:]:
            for entry in array.status:
                values = ', '.join(f'{kv.key} {kv.value}' for kv in entry.values)
                lines.append(f'{entry.name} ({time.monotonic() - received:.2f} s ago): '
                             f'{entry.message}; {values}')
        lines.append(f'chunks received {len(self.chunks)}, commands received '
                     f'{len(self.trajectories)}, camera sets sent '
                     f'{len(self.feeder.camera_stamps)}')
        return '\n'.join(lines) + '\n' + self.process.output()[-3000:]

    def latch_estop(self):
        """Publish a latched e-stop, wait until the node reports it; return the publisher."""
        estop = self.ros.node.create_publisher(Bool, 'pi0_ros/estop', LATCHED)
        estop.publish(Bool(data=True))
        assert self.ros.spin_until(lambda: self.latest_status().output_state
                                   == PolicyStatus.OUTPUT_ESTOP, 5.0, self.process)
        return estop

    def status_after(self, t):
        """Wait for a status received after monotonic time t and return it."""
        assert self.ros.spin_until(lambda: self.statuses[-1][0] > t, 5.0, self.process)
        return self.statuses[-1][1]


@pytest.fixture
def harness(start_process, ros_node):
    h = ControlNodeHarness(start_process, ros_node)
    h.feeder.say('pick up the red cube')
    h.wait_following()
    return h


def check_command(msg):
    """Assert that one JointTrajectory is valid for the joint_trajectory_controller."""
    assert command_problems(msg) == []


def test_commands_at_control_rate_valid_within_limits_and_stamped_chunks(harness):
    ros = harness.ros
    # By default no thread of the node runs below the node's priority: a niced inference thread
    # yields the CPU to every camera driver and simulator on the host too.
    node_process = psutil.Process(harness.process.popen.pid)
    assert {os.getpriority(os.PRIO_PROCESS, thread.id) for thread in node_process.threads()} \
        == {os.getpriority(os.PRIO_PROCESS, node_process.pid)}
    start = len(harness.trajectories)
    ros.spin_for(8.0)
    window = harness.trajectories[start:]
    receive_times = np.array([t for t, _ in window])
    rate = (len(window) - 1) / (receive_times[-1] - receive_times[0])
    node_rate = harness.latest_status().control_rate_hz
    # Stamped with the tick that planned them: one control period apart on the node's clock.
    stamps = np.array([stamp_to_nanoseconds(msg.header.stamp) for _, msg in window]) * 1e-9
    periods = np.diff(stamps)
    # On failure, say whether ticks were missed (gaps in the stamps) or commands not received.
    seen = (f'output rate {rate:.2f} Hz received; node rate {node_rate:.2f} Hz; '
            f'{len(window)} commands over {stamps[-1] - stamps[0]:.3f} s of stamps, largest '
            f'stamp gap {periods.max() * 1e3:.1f} ms, largest receive gap '
            f'{np.diff(receive_times).max() * 1e3:.1f} ms\n' + harness.report())
    assert abs(rate - CONTROL_RATE) / CONTROL_RATE <= 0.02, seen
    assert abs(node_rate - CONTROL_RATE) / CONTROL_RATE <= 0.02, seen
    for _, msg in window:
        check_command(msg)
    assert np.all(periods > 0) and abs(np.median(periods) - 1 / CONTROL_RATE) < 2e-3
    assert abs(stamps[-1] - ros.node.get_clock().now().nanoseconds * 1e-9) < 1.0
    # Every chunk is stamped with the stamp of a camera set that was published.
    assert len(harness.chunks) >= 5
    published = set(harness.feeder.camera_stamps)
    for _, chunk in harness.chunks:
        assert stamp_to_nanoseconds(chunk.header.stamp) in published
        assert chunk.horizon == 50 and len(chunk.actions) == 50 * len(SO101_JOINTS)
        assert np.all(np.isfinite(chunk.actions))
    status = harness.latest_status()
    assert status.lifecycle_state == 'active'
    assert status.chunks_produced >= 5 and status.inference_latency_p50_ms > 0
    assert abs(status.control_rate_hz - CONTROL_RATE) / CONTROL_RATE < 0.05
    names = {s.name for _, array in harness.diagnostics for s in array.status}
    assert any(name.endswith(': engine') for name in names)
    assert any(name.endswith(': output') for name in names)
    # Frames are encoded as they arrive (every set has new stamps, so a vision cache hit is a
    # frame encoded ahead that its observation then used).
    engine = [{kv.key: kv.value for kv in s.values} for _, array in harness.diagnostics
              for s in array.status if s.name.endswith(': engine')][-1]
    assert int(engine['frames encoded ahead']) > 0
    assert int(engine['vision cache hits']) > 0 and status.vision_cache_hits > 0
    assert harness.process.returncode is None


def test_cameras_stop_holds_within_stale_timeout(harness):
    ros = harness.ros
    harness.feeder.cameras_on = False
    stopped = harness.trajectories[-1][0]
    # (A status of 'joint states stale' may come first where this test process's feeder
    # stalls for 0.25 s on a loaded machine: seen once in a CI run with a core kept busy.)
    assert ros.spin_until(lambda: harness.latest_status().output_state
                          == PolicyStatus.OUTPUT_HOLDING
                          and harness.latest_status().hold_reason == 'observation stale',
                          3.0, harness.process), harness.latest_status()
    # Hold: a few control periods later every command is at rest at one position.
    ros.spin_for(1.5)
    held = [msg for t, msg in harness.trajectories if t > stopped + 1.2]
    assert held
    for msg in held:
        check_command(msg)
        assert all(v == 0.0 for p in msg.points for v in p.velocities)
    first = np.array(held[0].points[0].positions)
    for msg in held:
        assert np.array_equal(np.array(msg.points[-1].positions), first)
    # Cameras back: the node follows the policy again.
    harness.feeder.cameras_on = True
    harness.wait_following(timeout=10.0)


def test_new_instruction_discards_old_epoch_chunks(harness):
    ros = harness.ros
    assert ros.spin_until(lambda: len(harness.chunks) >= 2, 20.0, harness.process)
    old_epoch = harness.chunks[-1][1].instruction_epoch
    # From a default-QoS (volatile) publisher, not the feeder's latched one.
    instruction = ros.node.create_publisher(String, 'instruction', 10)
    assert ros.spin_until(lambda: instruction.get_subscription_count() > 0, 10.0,
                          harness.process), 'the instruction publisher matched no subscription'
    instruction.publish(String(data='put the cube in the bowl'))
    assert ros.spin_until(lambda: harness.chunks[-1][1].instruction_epoch == old_epoch + 1,
                          20.0, harness.process)
    first_new = next(i for i, (_, c) in enumerate(harness.chunks)
                     if c.instruction_epoch == old_epoch + 1)
    ros.spin_for(1.0)
    assert all(c.instruction_epoch == old_epoch + 1 for _, c in harness.chunks[first_new:])


def test_an_estop_from_any_kind_of_publisher_latches_the_hold_until_enabled(harness, ros_node):
    # A default-QoS publisher (reliable, volatile: rclpy/rclcpp code, rqt, safety bridges), a
    # best-effort one and a latched one are all heard.
    ros = harness.ros
    client = ros_node.node.create_client(SetBool, 'pi0_ros/enable')
    assert client.wait_for_service(timeout_sec=5.0)
    for name, qos in (('volatile', 10), ('best effort', qos_profile_sensor_data),
                      ('transient local', LATCHED)):
        estop = ros.node.create_publisher(Bool, 'pi0_ros/estop', qos)
        assert ros.spin_until(lambda: estop.get_subscription_count() > 0, 10.0,
                              harness.process), f'{name} e-stop publisher matched no subscription'
        estop.publish(Bool(data=True))
        # A best-effort publisher repeats itself (a message may go before the reader matched).
        repeat = (ros.node.create_timer(0.05, lambda: estop.publish(Bool(data=True)))
                  if name == 'best effort' else None)
        assert ros.spin_until(lambda: harness.latest_status().output_state
                              == PolicyStatus.OUTPUT_ESTOP, 5.0, harness.process), name
        if repeat is not None:
            ros.node.destroy_timer(repeat)
        future = client.call_async(SetBool.Request(data=True))
        assert ros.spin_until(future.done, 5.0, harness.process)
        assert future.result().success
        harness.wait_following(timeout=10.0)
        ros.node.destroy_publisher(estop)


def test_bad_inputs_are_rejected_counted_and_survived(start_process, ros_node):
    harness = ControlNodeHarness(start_process, ros_node, compressed=('wrist',),
                                 parameters={'camera_transports': ['raw', 'raw', 'compressed']})
    harness.feeder.say('pick up the red cube')
    harness.wait_following()
    ros, node = harness.ros, ros_node.node
    # The feeder's publishers are already matched with the node's subscriptions.
    camera = harness.feeder.image_pubs['front']
    wrist = harness.feeder.image_pubs['wrist']
    joints = harness.feeder.joint_pub
    instruction = harness.feeder.instruction_pub
    now = node.get_clock().now().to_msg()
    bad_encoding = Image(height=4, width=4, encoding='yuv422', step=8, data=bytes(32))
    wrong_size = Image(height=4, width=4, encoding='rgb8', step=12, data=bytes(40))
    corrupt_jpeg = CompressedImage(format='jpeg', data=b'\xff\xd8\xff' + bytes(100))
    missing_joint = JointState(name=SO101_JOINTS[:-1], position=[0.0] * 5)
    nan_joint = JointState(name=SO101_JOINTS, position=[0.0] * 5 + [float('nan')])
    for msg in (bad_encoding, wrong_size, corrupt_jpeg, missing_joint, nan_joint):
        msg.header.stamp = now
    before = harness.latest_status().inputs_rejected
    started = harness.statuses[-1][0]
    # Best-effort topics may drop one message under load: send each bad one a few times.
    for _ in range(3):
        camera.publish(bad_encoding)
        camera.publish(wrong_size)
        wrist.publish(corrupt_jpeg)
        joints.publish(missing_joint)
        ros.spin_for(0.05)
        joints.publish(nan_joint)
        ros.spin_for(0.05)
    instruction.publish(String(data='   '))
    assert ros.spin_until(lambda: harness.latest_status().inputs_rejected >= before + 6, 10.0,
                          harness.process), harness.process.output()[-3000:]
    status = harness.status_after(started)
    assert status.engine_state != PolicyStatus.ENGINE_FAILED
    reasons = ('unsupported encoding', 'inconsistent image size', 'corrupt image',
               'missing joints', 'non-finite joint state', 'empty instruction')
    assert ros.spin_until(lambda: all(r in harness.process.output() for r in reasons), 5.0), \
        harness.process.output()[-3000:]
    # Still alive and commanding: the bad inputs changed nothing else.
    instruction.publish(String(data='pick up the red cube'))
    harness.wait_following(timeout=10.0)
    count = len(harness.trajectories)
    # 40 more commands (0.8 s at 50 Hz), given up to 3 s to arrive: with a busy core this
    # process receives them late (35 in the first second of one fresh-clone run).
    assert ros.spin_until(lambda: len(harness.trajectories) >= count + 40, 3.0,
                          harness.process), harness.report()
    for _, msg in harness.trajectories[count:]:
        check_command(msg)


def test_disable_hands_the_controller_over_and_enable_resumes_without_a_jump(
        harness, ros_node):
    ros = harness.ros
    client = ros_node.node.create_client(SetBool, 'pi0_ros/enable')
    assert client.wait_for_service(timeout_sec=5.0)

    def call(data):
        future = client.call_async(SetBool.Request(data=data))
        assert ros.spin_until(future.done, 5.0, harness.process)
        assert future.result().success

    call(False)
    # Braking, then silence: nothing is published once the arm is at rest.
    assert ros.spin_until(lambda: harness.trajectories[-1][0] < time.monotonic() - 0.5, 5.0,
                          harness.process)
    assert harness.latest_status().output_state == PolicyStatus.OUTPUT_DISABLED
    for _, msg in harness.trajectories[-3:]:
        check_command(msg)
        assert all(v == 0.0 for v in msg.points[-1].velocities)
    # Someone else moves the arm meanwhile (MoveIt): the first command after enabling starts
    # from the measured position, not from where the policy left it.
    moved = harness.feeder.positions.copy()
    moved[0] += 0.3 if moved[0] < 0.0 else -0.3
    harness.feeder.positions = moved
    ros.spin_for(0.3)
    # Handed over, an e-stop and a deactivation publish nothing: a hold now would command the
    # policy's last position, where the arm no longer is.
    count = len(harness.trajectories)
    estop = harness.latch_estop()
    lifecycle = ros_node.node.create_client(ChangeState, 'pi0_ros/change_state')
    assert lifecycle.wait_for_service(timeout_sec=5.0)
    for transition_id in (Transition.TRANSITION_DEACTIVATE, Transition.TRANSITION_ACTIVATE):
        future = lifecycle.call_async(ChangeState.Request(
            transition=Transition(id=transition_id)))
        assert ros.spin_until(future.done, 10.0, harness.process)
        assert future.result().success, transition_id
    ros.spin_for(0.5)
    assert len(harness.trajectories) == count, 'commanded while handed over'
    estop.publish(Bool(data=False))
    call(True)  # clears the e-stop and takes the controller back
    assert ros.spin_until(lambda: len(harness.trajectories) > count, 5.0, harness.process)
    first = np.array(harness.trajectories[count][1].points[0].positions)
    assert np.max(np.abs(first - moved)) < 0.05, (first, moved)
    harness.wait_following(timeout=10.0)


def test_an_arm_outside_its_limits_is_not_commanded_until_it_is_back_inside(
        start_process, ros_node):
    harness = ControlNodeHarness(start_process, ros_node)
    outside = np.zeros(len(SO101_JOINTS))
    outside[-1] = SO101_POSITION_LOWER[-1] - 0.1      # the gripper 0.1 rad below its limit
    harness.feeder.positions = outside
    harness.feeder.say('pick up the red cube')
    ros = harness.ros
    assert ros.spin_until(lambda: harness.statuses and 'outside the position limits'
                          in harness.latest_status().hold_reason, 90.0, harness.process), \
        harness.process.output()[-3000:]
    # The joint is named, as in joint_states.
    assert f'{SO101_JOINTS[-1]} at ' in harness.latest_status().hold_reason
    ros.spin_for(0.5)
    assert harness.trajectories == [], 'commanded an arm outside its limits'
    assert 'not commanding: measured position outside' in harness.process.output()
    assert f'{SO101_JOINTS[-1]} at ' in harness.process.output()
    harness.feeder.positions = np.zeros(len(SO101_JOINTS))   # moved back inside by hand
    harness.wait_following(timeout=10.0)
    first = np.array(harness.trajectories[0][1].points[0].positions)
    assert np.max(np.abs(first)) < 0.05, first
    for _, msg in harness.trajectories:
        check_command(msg)


@pytest.mark.parametrize('priority', [10, 0])
def test_cleanup_and_configure_again_restart_the_control_timer(
        start_process, ros_node, priority):
    """The control timer (own real-time thread, or the executor's) stops and starts again."""
    harness = ControlNodeHarness(start_process, ros_node,
                                 parameters={'control_thread_priority': priority})
    harness.feeder.say('pick up the red cube')
    harness.wait_following()
    ros = harness.ros
    client = ros_node.node.create_client(ChangeState, 'pi0_ros/change_state')
    assert client.wait_for_service(timeout_sec=5.0)

    def transition(transition_id):
        future = client.call_async(ChangeState.Request(
            transition=Transition(id=transition_id)))
        assert ros.spin_until(future.done, 60.0, harness.process)
        assert future.result().success, transition_id

    # Priority 10: 'control timer on its own thread at SCHED_FIFO priority 10', or the warning
    # that the priority was refused (no CAP_SYS_NICE or rtprio limit); once per configure.
    line = 'SCHED_FIFO priority 10' if priority else 'control timer on the executor'
    assert harness.process.output().count(line) == 1, harness.process.output()[-3000:]
    transition(Transition.TRANSITION_DEACTIVATE)
    transition(Transition.TRANSITION_CLEANUP)
    ros.spin_for(0.5)
    stopped = time.monotonic()
    ros.spin_for(0.5)
    assert [t for t, _ in harness.trajectories if t > stopped] == []
    transition(Transition.TRANSITION_CONFIGURE)
    transition(Transition.TRANSITION_ACTIVATE)
    harness.wait_following(timeout=30.0)
    count = len(harness.trajectories)
    # 4 s. With priority 0 the timer shares the executor (and the GIL) with the camera
    # callbacks and the CPU inference thread: on a loaded 2-core machine (CI) it misses ticks
    # (two of five CI runs in session 15 measured 43.9 Hz over 2 s and 47.0 Hz over 4 s), so
    # 10 % there; its own real-time thread keeps 5 %. Either still shows that the timer came
    # back once, at its rate (not stopped, not doubled).
    ros.spin_for(4.0)
    window = harness.trajectories[count:]
    rate = (len(window) - 1) / (window[-1][0] - window[0][0])
    tolerance = 0.05 if priority else 0.10
    assert abs(rate - CONTROL_RATE) / CONTROL_RATE <= tolerance, f'output rate {rate:.2f} Hz'
    for _, msg in window:
        check_command(msg)
    output = harness.process.output()
    assert output.count(line) == 2, output[-3000:]
    assert 'did not stop' not in output


@pytest.mark.parametrize('priority', [10, 0])
def test_publish_on_chunk_sends_each_chunk_at_once_and_keeps_the_ticks_period(
        start_process, ros_node, priority):
    """With publish_on_chunk a chunk is published when it arrives, between the fixed ticks."""
    rate = 5.0  # a long period, so that a chunk waiting for the tick would be obvious
    harness = ControlNodeHarness(start_process, ros_node, parameters={
        'control_rate': rate, 'publish_on_chunk': True, 'control_thread_priority': priority})
    harness.feeder.say('pick up the red cube')
    harness.wait_following()
    ros = harness.ros
    commands, chunks = len(harness.trajectories), len(harness.chunks)
    start = time.monotonic()
    ros.spin_for(6.0)
    elapsed = time.monotonic() - start
    window = [msg for _, msg in harness.trajectories[commands:]]
    new_chunks = harness.chunks[chunks:]
    assert len(new_chunks) >= 5, harness.report()
    for msg in window:
        check_command(msg)
    # Every accepted chunk adds one command to the ticks' (a chunk that arrives within 2 ms of
    # a tick waits for it, and one at either end of the window may fall outside it).
    extra = len(window) - elapsed * rate
    assert extra >= 0.8 * len(new_chunks) - 2, (len(window), elapsed, len(new_chunks))
    status = harness.latest_status()
    assert abs(status.control_rate_hz - rate) / rate < 0.05  # the ticks keep their period

    def commands_on_chunk():
        reports = [{kv.key: kv.value for kv in s.values} for _, array in harness.diagnostics
                   for s in array.status if s.name.endswith(': output')]
        return int(reports[-1]['commands on chunk arrival']) if reports else 0

    # Counted by the node: wait for the /diagnostics (5 Hz) that covers the window.
    assert ros.spin_until(lambda: commands_on_chunk() >= len(new_chunks) * 0.8, 5.0,
                          harness.process), (commands_on_chunk(), len(new_chunks))
    # Off again (a live parameter): commands only at the ticks.
    client = ros_node.node.create_client(SetParameters, 'pi0_ros/set_parameters')
    assert client.wait_for_service(timeout_sec=5.0)
    future = client.call_async(SetParameters.Request(parameters=[
        Parameter('publish_on_chunk', value=False).to_parameter_msg()]))
    assert ros.spin_until(future.done, 10.0, harness.process)
    assert future.result().results[0].successful
    ros.spin_for(0.5)
    commands, chunks = len(harness.trajectories), len(harness.chunks)
    start = time.monotonic()
    ros.spin_for(4.0)
    elapsed = time.monotonic() - start
    assert len(harness.chunks) - chunks >= 3, harness.report()
    assert len(harness.trajectories) - commands <= elapsed * rate + 1


def test_rtc_chunks_continue_the_executing_plan(start_process, ros_node):
    """chunk_handover rtc: each chunk is guided towards the plan it takes over from."""
    harness = ControlNodeHarness(start_process, ros_node, parameters={'chunk_handover': 'rtc'})
    harness.feeder.say('pick up the red cube')
    harness.wait_following()
    ros = harness.ros
    first = len(harness.chunks)
    assert ros.spin_until(lambda: len(harness.chunks) >= first + 8, 30.0, harness.process)
    for _, msg in harness.trajectories[-20:]:
        check_command(msg)
    chunks = [msg for _, msg in harness.chunks[first:]]
    joints = len(SO101_JOINTS)
    guided, free = [], []
    for previous, new in zip(chunks, chunks[1:]):
        executing = Chunk(stamp_to_nanoseconds(previous.header.stamp) * 1e-9, previous.dt,
                          np.reshape(previous.actions, (-1, joints)))
        t0 = stamp_to_nanoseconds(new.header.stamp) * 1e-9
        actions = np.reshape(new.actions, (-1, joints))
        times = t0 + new.dt * np.arange(len(actions))
        gap = np.linalg.norm(actions - executing.sample_many(times), axis=1)
        guided.append(gap[:3].mean())    # inside the delay: held to the plan
        free.append(gap[30:40].mean())   # past the execution horizon (10): not guided
    # The random model's chunks are unrelated where free; where guided every one continues the
    # plan it takes over from, also when the worker starts a call before the control tick has
    # taken the chunk that arrived last (the plan to continue is then that chunk).
    assert max(guided) < 0.05 * np.median(free), (guided, free)

    def engine_diagnostics():
        reports = [{kv.key: kv.value for kv in s.values} for _, array in harness.diagnostics
                   for s in array.status if s.name.endswith(': engine')]
        return reports[-1] if reports else {}

    # The counts arrive with the next /diagnostics (5 Hz): wait for them, not for a report
    # taken before the chunks above.
    assert ros.spin_until(lambda: int(engine_diagnostics().get('chunks guided (rtc)', 0)) >= 5,
                          5.0, harness.process), engine_diagnostics()
    assert int(engine_diagnostics()['rtc fallbacks']) == 0
