# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The control node's input callbacks called directly, in this process (tiny model on the CPU).

What the DDS tests cannot arrange at will: two frames with one stamp, a joint-state sample that
arrives late, an epoch that changes between a match and its observation. The node, its worker
thread and its engine are the real ones; only the message transport is left out.
"""
import gc
import threading
import time
from types import SimpleNamespace
import weakref

from diagnostic_msgs.msg import DiagnosticStatus
import numpy as np
import pytest
import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, String
from std_srvs.srv import SetBool

from pi0_ros.control import PlannerState
from pi0_ros.conversions import rgb_to_image, seconds_to_stamp, stamp_to_seconds
import pi0_ros.diagnostics
from pi0_ros.msg import PolicyStatus
import pi0_ros.node
from pi0_ros.node import Pi0ControlNode
from pi0_ros.parameters import SO101_JOINTS
from pi0_ros.worker import ChunkResult, InferenceWorker, Observation

pytestmark = pytest.mark.integration

CAMERAS = ('front', 'side', 'wrist')
TIMEOUT = 30.0


@pytest.fixture
def make_node(ros_domain_id):
    """Return a factory of configured, active nodes (parameter overrides as keywords)."""
    made = []

    def make(**parameters):
        context = rclpy.Context()
        rclpy.init(context=context, domain_id=ros_domain_id)
        overrides = {'device': 'cpu', 'control_thread_priority': 0, **parameters}
        control_node = Pi0ControlNode(context=context, parameter_overrides=[
            Parameter(name, value=value) for name, value in overrides.items()])
        made.append((control_node, context))
        if control_node.trigger_configure() == TransitionCallbackReturn.SUCCESS:
            control_node.trigger_activate()
        return control_node

    yield make
    for control_node, context in made:
        # Deactivate and clean up (stops the worker thread, destroys the interfaces) from
        # whatever state the test left it in.
        for transition in (control_node.trigger_deactivate, control_node.trigger_cleanup):
            try:
                transition()
            except RCLError:
                pass    # not a transition from the current state
        control_node.destroy_node()
        rclpy.shutdown(context=context)


@pytest.fixture
def node(make_node):
    return make_node()


def now(node):
    return node.get_clock().now().nanoseconds * 1e-9


def joint_state(stamp):
    msg = JointState(name=list(SO101_JOINTS), position=[0.0] * len(SO101_JOINTS))
    msg.header.stamp = seconds_to_stamp(stamp)
    return msg


def moving_joint_state(stamp, velocity=0.5, position=0.0):
    msg = joint_state(stamp)
    msg.position = [position] + [0.0] * (len(SO101_JOINTS) - 1)
    msg.velocity = [velocity] + [0.0] * (len(SO101_JOINTS) - 1)
    return msg


def frame(value, stamp, camera):
    return rgb_to_image(np.full((48, 64, 3), value, np.uint8), seconds_to_stamp(stamp), camera)


class Submissions:
    """Records the observations the node hands to its worker (and still hands them on)."""

    def __init__(self, worker):
        self.observations = []
        self.arrived = threading.Event()
        self._submit = worker.submit
        worker.submit = self

    def __call__(self, observation):
        self.observations.append(observation)
        self.arrived.set()
        self._submit(observation)


def instructed(node, *joint_offsets):
    """Record the node's submissions, give it an instruction and joint states at t + offsets."""
    submissions = Submissions(node._worker)
    node.instruction_callback(String(data='pick up the cube'))
    t = now(node)
    for offset in joint_offsets:
        node.joint_state_callback(joint_state(t + offset))
    return submissions, t


def test_two_frames_of_one_camera_with_one_stamp_are_not_taken_for_each_other(node):
    offered = []
    offer = node._worker.offer_frame
    node._worker.offer_frame = lambda *args: (offered.append(args[2]), offer(*args))
    submissions, t = instructed(node, -0.01, 0.01)
    node.image_callback(0, 'front', frame(10, t, 'front'))
    node.image_callback(0, 'front', frame(240, t, 'front'))   # same stamp, other pixels
    node.image_callback(1, 'side', frame(128, t, 'side'))
    node.image_callback(2, 'wrist', frame(128, t, 'wrist'))
    assert submissions.arrived.wait(TIMEOUT)
    observation = submissions.observations[0]
    assert (observation.frames[0] == 240).all()                # the synchronizer keeps the later
    assert offered[0] != offered[1]                            # its features are its own
    assert observation.frame_keys[0] == offered[1]


def test_a_late_joint_state_does_not_make_the_fresh_ones_look_stale(node):
    t = now(node)
    node.joint_state_callback(joint_state(t))
    node.joint_state_callback(joint_state(t - 1.0))            # delayed on the way, still valid
    assert node._inputs.last_joint_state_time == pytest.approx(t, abs=1e-6)  # ns round trip
    joint_state_time = node._inputs.last_joint_state_time
    assert node._hold_reason(t + 0.01, t, joint_state_time) != 'joint states stale'


def test_a_set_matched_before_an_epoch_change_is_not_submitted(node):
    submissions, t = instructed(node, -0.01, 0.01)
    for index, camera in enumerate(CAMERAS[:2]):
        node.image_callback(index, camera, frame(50, t, camera))
    # The stamp as the other two frames carry it (through a message: rounded to the ns); a
    # set whose stamps differ by that rounding is not final yet (the first set waits).
    stamp = stamp_to_seconds(seconds_to_stamp(t))
    with node._lock:
        matched = node._inputs.sync.add(2, stamp, (np.full((48, 64, 3), 50, np.uint8),
                                                   ('wrist', 0, 1)))
        epoch = node._epoch
    assert matched is not None
    node.instruction_callback(String(data='place it'))         # the epoch changes meanwhile
    node._inputs.on_synchronized(matched, epoch)
    assert submissions.observations == []
    node._inputs.on_synchronized(matched, node._epoch)         # on the current epoch: submitted
    assert [o.epoch for o in submissions.observations] == [node._epoch]


def test_a_result_of_an_older_epoch_reaching_the_node_is_dropped(node):
    # The worker checks the epoch before it delivers; one that changes in between (a clock
    # jump, a new instruction on another executor thread) is caught under the node's lock.
    node.instruction_callback(String(data='pick up the cube'))
    stale = SimpleNamespace(observation=SimpleNamespace(epoch=node._epoch))
    node.instruction_callback(String(data='place it'))
    current = SimpleNamespace(observation=SimpleNamespace(epoch=node._epoch))
    node._on_chunk_result(stale)
    node._on_chunk_result(current)
    assert list(node._pending_results) == [current]


def inputs_diagnostic(node):
    worker = node._worker
    array = node._build_diagnostics(node._build_status(now(node), worker), worker)
    return next(status for status in array.status if status.name.endswith(': inputs'))


def test_the_inputs_diagnostic_warns_while_rejections_are_recent(node, monkeypatch):
    assert inputs_diagnostic(node).level == DiagnosticStatus.OK
    bad = joint_state(now(node))
    bad.position[0] = float('nan')
    node.joint_state_callback(bad)
    entry = inputs_diagnostic(node)
    assert entry.level == DiagnosticStatus.WARN and entry.message.startswith('1 rejected')
    # Once the last rejection is older than the window, OK again; the count stays in the text.
    monkeypatch.setattr(pi0_ros.diagnostics, 'INPUT_WARN_S', -1.0)
    entry = inputs_diagnostic(node)
    assert entry.level == DiagnosticStatus.OK
    assert entry.message == 'ok (1 rejected since configure)'


def test_a_replan_horizon_of_zero_replans_when_the_chunk_runs_out(make_node):
    node = make_node(inference_trigger='horizon', replan_horizon=0.0)
    node._planner_initialized = True         # following a chunk that has just run out
    assert node._planner.remaining_horizon(now(node)) == 0.0
    with node._lock:
        assert node._wants_inference()


def test_configure_is_refused_while_an_abandoned_engine_build_still_runs(
        make_node, monkeypatch):
    release = threading.Event()
    build = pi0_ros.node.build_engine

    def slow_build(settings):
        release.wait(TIMEOUT)
        return build(settings)

    monkeypatch.setattr(pi0_ros.node, 'build_engine', slow_build)
    node = make_node(engine_ready_timeout=1.0)   # configure gives up; the build goes on
    assert node._worker is None and node._lingering_worker.alive
    assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
    release.set()                                # the first build ends, its thread exits
    assert node._lingering_worker._ready.wait(TIMEOUT)
    node._lingering_worker.stop(TIMEOUT)
    monkeypatch.setattr(pi0_ros.node, 'build_engine', build)
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS


def test_an_arm_still_moving_at_the_start_is_braked_not_stopped_within_one_point(node):
    # Another commander let go of an arm moving at 0.5 rad/s (joint 0): the first command
    # continues from the measured velocity at the acceleration limit.
    published = []
    node._trajectory_pub.publish = published.append
    node.joint_state_callback(moving_joint_state(now(node)))
    node.control_timer_callback()
    assert published, node._start_refused
    first = published[0].points[0]
    step = first.time_from_start.sec + first.time_from_start.nanosec * 1e-9
    assert first.velocities[0] == pytest.approx(0.5 - 10.0 * step, abs=1e-6)
    assert first.positions[0] > 0.0 and list(first.velocities[1:]) == [0.0] * 5


def test_a_garbage_joint_velocity_moves_neither_the_start_nor_the_observed_state(node):
    # A driver reports 1e6 rad/s for joint 0 of an arm at rest at 0.0 rad: beyond twice its
    # max_velocity, taken for a driver error, so nothing is extrapolated with it (before, the
    # plan started at the joint's limit, 1.92 rad away, and the observed state was ~5e4 rad).
    published = []
    node._trajectory_pub.publish = published.append
    submissions = Submissions(node._worker)
    node.instruction_callback(String(data='pick up the cube'))
    t = now(node)
    node.joint_state_callback(moving_joint_state(t - 0.05, velocity=1e6))
    node.control_timer_callback()
    assert published, node._start_refused
    first = published[0].points[0]
    assert first.positions[0] == pytest.approx(0.0, abs=1e-9) and first.velocities[0] == 0.0
    for index, camera in enumerate(CAMERAS):
        node.image_callback(index, camera, frame(128, t, camera))
    assert submissions.arrived.wait(TIMEOUT)
    assert submissions.observations[0].state[0] == 0.0


def test_an_estop_outlives_cleanup_and_configure_and_enable_starts_from_the_measured_arm(node):
    published = []
    node.estop_callback(Bool(data=True))       # e.g. not transient local: not heard again
    node.trigger_deactivate()
    node.trigger_cleanup()
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    node.trigger_activate()
    node._trajectory_pub.publish = published.append
    node.joint_state_callback(joint_state(now(node)))
    for _ in range(3):
        node.control_timer_callback()
    # Latched before the configure, not commanding: nothing goes to the controller.
    assert published == [] and node._estop_latched
    # Another commander moves the arm meanwhile; ~/enable clears the e-stop, and the first
    # command starts where the arm is now, not where the node first measured it.
    moved = joint_state(now(node))
    moved.position = [0.3] + [0.0] * (len(SO101_JOINTS) - 1)
    node.joint_state_callback(moved)
    response = node.enable_callback(SetBool.Request(data=True), SetBool.Response())
    assert response.success and not node._estop_latched
    node.control_timer_callback()
    assert published, node._start_refused
    assert published[0].points[0].positions[0] == pytest.approx(0.3, abs=1e-6)


def test_the_loaded_engine_is_out_of_the_collectors_passes_until_cleanup_frees_it(node):
    engine = weakref.ref(node._worker._engine)
    # Configured: the engine and its modules are frozen (full passes would walk them otherwise).
    assert gc.get_freeze_count() > 0
    assert not any(o is engine() for o in gc.get_objects())
    assert not any(o is node for o in gc.get_objects())
    node.trigger_deactivate()
    node.trigger_cleanup()
    # Given back to the collector with the engine gone (whatever of it was in cycles is freed).
    assert engine() is None and any(o is node for o in gc.get_objects())


def test_a_stamp_ahead_of_the_clock_does_not_keep_the_inputs_fresh_for_longer(node):
    # A camera or joint-state clock 0.45 s ahead (within max_future_stamp, 0.5 s): their age
    # counts from their arrival, so the watchdogs fire after the timeouts, as without skew.
    submissions, t = instructed(node, 0.45)
    joint_time = node._inputs.last_joint_state_time
    assert joint_time <= now(node)
    for index, camera in enumerate(CAMERAS):
        node.image_callback(index, camera, frame(50, t + 0.45, camera))
    node._inputs.on_synchronized(SimpleNamespace(stamp=t + 0.45, skew=0.0, items=[
        (np.zeros((48, 64, 3), np.uint8), (camera, 0, 9)) for camera in CAMERAS]), node._epoch)
    assert submissions.observations and node._inputs.last_observation_stamp <= now(node)
    later = joint_time + node._settings.joint_state_timeout + 0.01
    assert node._hold_reason(later, node._inputs.last_observation_stamp,
                             joint_time) == 'joint states stale'


def test_inputs_judged_on_the_clock_before_a_backward_jump_are_not_buffered(node):
    # The jump (a sim-time reset) lands between a callback's clock reading and its lock (the
    # callbacks run on other executor threads than the jump's).
    t = now(node)
    clock = node._now
    jumped = []

    def clock_then_jump():
        reading = clock()
        if not jumped:
            jumped.append(True)
            node.clock_jump_callback(SimpleNamespace(delta=SimpleNamespace(
                nanoseconds=-10**9)))
        return reading

    node._now = clock_then_jump
    node.joint_state_callback(joint_state(t))
    assert len(node._inputs.joint_buffer) == 0 and node._inputs.last_joint_state_time is None
    jumped.clear()
    node.image_callback(0, 'front', frame(50, t, 'front'))
    assert node._inputs.sync.queued(0) == 0


def test_a_set_older_than_one_already_handed_on_is_dropped(node):
    submissions, t = instructed(node, -0.05, 0.01)

    def matched(stamp):
        return SimpleNamespace(stamp=stamp, skew=0.0, items=[
            (np.zeros((48, 64, 3), np.uint8), (camera, int(stamp * 1e9), 1))
            for camera in CAMERAS])

    node._inputs.on_synchronized(matched(t), node._epoch)
    node._inputs.on_synchronized(matched(t - 0.033), node._epoch)   # its thread ran late
    assert [o.stamp for o in submissions.observations] == [t]


def test_use_sim_time_cannot_change_while_configured(node):
    result = node.set_parameters([Parameter('use_sim_time', value=True)])[0]
    assert not result.successful and 'clean up first' in result.reason
    assert not node.get_clock().ros_time_is_active      # the clock was not switched
    assert node.set_parameters([Parameter('use_sim_time', value=False)])[0].successful
    node.trigger_deactivate()
    node.trigger_cleanup()
    assert node.set_parameters([Parameter('use_sim_time', value=True)])[0].successful


@pytest.mark.parametrize('hold', ['disabled', 'estop'])
def test_a_disabled_or_estopped_node_commands_nothing_even_while_the_arm_moves(node, hold):
    # Handed over (disabled) or e-stopped before a reconfigure: another commander may move the
    # arm; a braking command from its measured velocity would replace that commander's goal.
    if hold == 'disabled':
        node.enable_callback(SetBool.Request(data=False), SetBool.Response())
    else:
        node.estop_callback(Bool(data=True))
    node.trigger_deactivate()
    node.trigger_cleanup()
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    node.trigger_activate()
    published = []
    node._trajectory_pub.publish = published.append
    for _ in range(5):
        node.joint_state_callback(moving_joint_state(now(node), velocity=1e-4 + 0.3))
        node.control_timer_callback()
    assert published == []
    # Enabled: from the measured arm, continuing its velocity.
    node.enable_callback(SetBool.Request(data=True), SetBool.Response())
    node.control_timer_callback()
    assert published and published[0].points[0].velocities[0] > 0.0


def test_a_start_extrapolated_past_a_limit_is_clipped_not_refused(node):
    upper = node._limits.position_upper[0]
    published = []
    node._trajectory_pub.publish = published.append
    # Measured 5 mm inside the limit 30 ms ago, moving out at 0.5 rad/s: "now" it is past it.
    node.joint_state_callback(moving_joint_state(now(node) - 0.03, position=upper - 0.005))
    node.control_timer_callback()
    assert published, node._start_refused
    first = published[0].points[0]
    assert first.positions[0] <= upper and first.velocities[0] == 0.0


def test_a_start_beyond_the_extrapolation_window_is_at_rest_where_last_measured(make_node):
    node = make_node(joint_state_max_extrapolation=0.05)
    published = []
    node._trajectory_pub.publish = published.append
    node.joint_state_callback(moving_joint_state(now(node) - 0.1, velocity=0.3))  # 100 ms old
    node.control_timer_callback()
    first = published[0].points[0]
    assert first.positions[0] == pytest.approx(0.0, abs=1e-9) and first.velocities[0] == 0.0


def test_a_future_stamped_joint_state_does_not_start_the_plan_once_stale(node):
    published = []
    node._trajectory_pub.publish = published.append
    t = now(node)
    node.joint_state_callback(joint_state(t + 0.45))           # a clock 0.45 s ahead
    clock = node._now
    node._now = lambda: clock() + node._settings.joint_state_timeout + 0.05
    node.control_timer_callback()
    assert published == []          # 0.3 s after its arrival it is stale, whatever its stamp


def test_enable_after_the_inference_thread_crashed_says_it_cannot_resume(node, monkeypatch):
    monkeypatch.setattr(node._worker, 'recover', lambda: False)
    node._worker.state = pi0_ros.node.WorkerState.FAILED
    response = node.enable_callback(SetBool.Request(data=True), SetBool.Response())
    assert 'clean up and configure again' in response.message


def chunk_result(node, stamp, target=0.5):
    """Return a result as the worker delivers it, for the node's current epoch."""
    observation = Observation(stamp=stamp, stamp_ns=int(stamp * 1e9), frames=(), frame_keys=(),
                              state=np.zeros(len(SO101_JOINTS)), instruction='pick up the cube',
                              epoch=node._epoch)
    actions = np.zeros((50, len(SO101_JOINTS)))
    actions[:, 0] = target
    return ChunkResult(observation, actions, {}, 0, 0.01)


def fresh_tick(node):
    """Run one control tick with fresh joint states and an observation just matched."""
    t = now(node)
    node.joint_state_callback(joint_state(t))
    with node._lock:
        node._inputs.last_observation_stamp = t
    node.control_timer_callback()


def capture(node):
    trajectories, chunks = [], []
    node._trajectory_pub.publish = trajectories.append
    node._chunk_pub.publish = chunks.append
    return trajectories, chunks


def test_a_chunk_for_the_previous_instruction_is_discarded_at_the_next_tick(node):
    # The result arrived for the current instruction; the instruction changed before the
    # control tick took it: it must not be followed, and it is counted.
    trajectories, chunks = capture(node)
    node.instruction_callback(String(data='pick up the cube'))
    fresh_tick(node)                                        # plan started, holding at rest
    node._on_chunk_result(chunk_result(node, now(node)))
    node.instruction_callback(String(data='put it down'))
    fresh_tick(node)
    assert chunks == [] and node._planner.state is not PlannerState.FOLLOWING
    assert all(not any(point.velocities) for point in trajectories[-1].points)
    assert node._build_status(now(node), node._worker).chunks_discarded == 1


def test_results_the_node_cannot_use_while_not_commanding_are_counted_as_discarded(node):
    capture(node)
    node.enable_callback(SetBool.Request(data=False), SetBool.Response())  # no plan started
    for _ in range(3):
        node._on_chunk_result(chunk_result(node, now(node)))
        fresh_tick(node)
    stale = chunk_result(node, now(node))
    node.instruction_callback(String(data='put it down'))
    node._on_chunk_result(stale)                            # arrives after the change
    status = node._build_status(now(node), node._worker)
    assert status.chunks_produced == 0 and status.chunks_discarded == 4


def test_disabling_just_after_a_plan_from_rest_brakes_it_to_rest(node):
    # The plan published on the tick before the disable starts at rest and accelerates: the
    # commanded state at that tick was at rest, the motion is not; it must be braked.
    trajectories, _ = capture(node)
    node.instruction_callback(String(data='pick up the cube'))
    fresh_tick(node)
    node._on_chunk_result(chunk_result(node, now(node), target=1.0))
    fresh_tick(node)
    assert max(point.velocities[0] for point in trajectories[-1].points) > 0.1
    published = len(trajectories)
    node.enable_callback(SetBool.Request(data=False), SetBool.Response())
    for _ in range(30):
        fresh_tick(node)
        time.sleep(0.02)
    braking = trajectories[published:]
    assert braking, 'no braking trajectory after the disable'
    assert all(not any(point.velocities) for point in braking[-1].points[-1:])
    assert not node._commanding                             # at rest, then handed over
    count = len(trajectories)
    fresh_tick(node)
    assert len(trajectories) == count


def test_status_shows_an_estop_or_a_disable_before_any_plan_started(node):
    node.estop_callback(Bool(data=True))                    # no joint state yet: no plan
    assert node._build_status(now(node), node._worker).output_state == \
        PolicyStatus.OUTPUT_ESTOP
    node.enable_callback(SetBool.Request(data=True), SetBool.Response())
    node.enable_callback(SetBool.Request(data=False), SetBool.Response())
    assert node._build_status(now(node), node._worker).output_state == \
        PolicyStatus.OUTPUT_DISABLED


def test_a_shutdown_waits_for_a_tick_running_on_another_executor_thread(node):
    # With the timer on a multi-threaded executor (no control thread), a lifecycle transition
    # may run while a tick does: the worker and publishers the tick uses must outlive it.
    node._trajectory_pub.publish = lambda msg: None
    node.joint_state_callback(joint_state(now(node)))
    node.control_timer_callback()                           # plan started
    in_tick = threading.Event()
    set_enabled = node._planner.set_enabled

    def slow_set_enabled(enabled):                          # widens the window inside a tick
        in_tick.set()
        time.sleep(0.3)
        set_enabled(enabled)

    node._planner.set_enabled = slow_set_enabled
    errors = []

    def tick():
        try:
            node.control_timer_callback()
        except Exception as error:  # noqa: B902 - what the executor would re-raise
            errors.append(repr(error))

    thread = threading.Thread(target=tick)
    thread.start()
    assert in_tick.wait(TIMEOUT)
    node.trigger_shutdown()
    thread.join(TIMEOUT)
    assert errors == []


def test_configure_succeeds_when_the_engine_becomes_ready_just_after_a_wait_ends(
        make_node, monkeypatch):
    # The configuring thread is preempted between a wait that timed out and its look at the
    # worker's state, and the engine becomes ready meanwhile: that is a success, not a failure.
    build = pi0_ros.node.build_engine
    monkeypatch.setattr(pi0_ros.node, 'build_engine',
                        lambda settings: (time.sleep(0.25), build(settings))[1])
    wait_ready = InferenceWorker.wait_ready

    def preempted_after_the_wait(worker, timeout):
        ready = wait_ready(worker, timeout)
        worker._ready.wait(TIMEOUT)                 # the engine thread finishes meanwhile
        return ready

    monkeypatch.setattr(InferenceWorker, 'wait_ready', preempted_after_the_wait)
    node = make_node()
    assert node._worker is not None and node._active


def test_a_blocked_command_does_not_count_toward_the_output_rate(node, monkeypatch):
    trajectories, _ = capture(node)
    for _ in range(3):
        fresh_tick(node)
        time.sleep(0.01)
    assert node._build_status(now(node), node._worker).control_rate_hz > 0.0
    monkeypatch.setattr(pi0_ros.node, 'validate_trajectory', lambda *args: ['injected'])
    for _ in range(5):
        fresh_tick(node)
    status = node._build_status(now(node), node._worker)
    assert len(trajectories) == 3 and node._counters['commands_blocked'] == 5
    assert status.control_rate_hz == 0.0         # nothing published: no rate, not a stale one


def test_an_observation_stamped_zero_has_an_age(node):
    # Under sim time the first frames may carry stamp 0.0: that is an observation, not none
    # (-1, the value before any observation).
    assert node._build_status(now(node), node._worker).observation_age_s == -1.0
    with node._lock:
        node._inputs.last_observation_stamp = 0.0
    t = now(node)
    assert node._build_status(t, node._worker).observation_age_s == t


def test_a_configure_whose_interfaces_cannot_be_made_fails_with_the_reason(node, monkeypatch):
    # rclpy's lifecycle turned such an exception into ERROR without logging it.
    node.trigger_deactivate()
    node.trigger_cleanup()
    logged = []
    logger = node.get_logger()
    monkeypatch.setattr(type(logger), 'error', lambda self, message, **kwargs:
                        logged.append(message))

    def refuse(settings):
        raise ValueError('topic name must not contain a space')

    monkeypatch.setattr(node, '_create_interfaces', refuse)
    assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
    assert any('topic name must not contain a space' in message for message in logged)
    assert node._worker is None


def test_only_topics_whose_mismatch_this_node_must_report_have_qos_event_handlers(node):
    # Each QoS event handler is a waitable that every wait of the executor handles (a fleet's
    # executor serves every robot's): the node keeps those whose warning only it can give.
    handlers = {}
    for subscription in node.subscriptions:
        handlers.setdefault(subscription.topic_name, []).append(
            len(subscription.event_handlers))
    # Every input topic: one subscription (the most permissive) reports a publisher it cannot
    # hear, and one of another type; the stricter ones of a command topic report nothing.
    assert len(handlers) == 6, handlers
    for topic, counts in handlers.items():
        assert sorted(counts) == [0] * (len(counts) - 1) + [2], (topic, counts)
    published = {publisher.topic_name: len(publisher.event_handlers)
                 for publisher in node.publishers}
    # Commands: rclpy's warnings; reports: none (their subscribers warn of a mismatch).
    assert published['/joint_trajectory'] == 2
    reports = [topic for topic in published if topic.endswith(('/status', '/action_chunk'))]
    assert len(reports) == 2 and published['/diagnostics'] == 0, published
    assert all(published[topic] == 0 for topic in reports), published
