# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""NodeInputs with a stand-in node: its subscriptions, what it stores, counts and hands on."""
import threading

import numpy as np
import pytest
from rclpy.qos import DurabilityPolicy, qos_profile_sensor_data, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Bool, String

from pi0_ros.conversions import rgb_to_image, seconds_to_stamp, stamp_to_nanoseconds
from pi0_ros.inputs import LOG_THROTTLE_S, NodeInputs
from pi0_ros.parameters import settings_from_values, SO101_JOINTS, SO101_MAX_VELOCITY, SPECS

CAMERAS = ('front', 'side', 'wrist')
T = 100.0  # the ROS clock's reading, seconds


class Logger:
    """Records what is logged (by level), and at which throttle."""

    def __init__(self, logged):
        self._logged = logged

    def get_child(self, name):
        return self

    def __getattr__(self, level):
        return lambda message, **kwargs: self._logged.append(
            (level, message, kwargs.get('throttle_duration_sec')))


class StandInNode:
    """Records the subscriptions asked for and the messages logged."""

    def __init__(self):
        self.subscriptions = []
        self.logged = []

    def create_subscription(self, msg_type, topic, callback, qos, *, callback_group,
                            event_callbacks):
        self.subscriptions.append((msg_type, topic, qos))
        return topic

    def get_logger(self):
        return Logger(self.logged)


class Told:
    """What the inputs tell the node, by callback."""

    def __init__(self):
        self.frames, self.observations, self.epochs, self.estops = [], [], [], 0

    def estop(self):
        self.estops += 1


def make_inputs(clock=T, **parameters):
    node, told = StandInNode(), Told()
    values = {name: spec.default for name, spec in SPECS.items()}
    values.update(parameters)
    inputs = NodeInputs(node, threading.Lock(), now=lambda: clock,
                        on_frame=lambda *frame: told.frames.append(frame),
                        on_observation=told.observations.append,
                        on_epoch=told.epochs.append, on_estop=told.estop)
    subscriptions = []
    inputs.configure(settings_from_values(values), np.array(SO101_MAX_VELOCITY), subscriptions)
    return inputs, node, told, subscriptions


def joint_state(stamp, position=0.0):
    msg = JointState(name=list(SO101_JOINTS), position=[position] * len(SO101_JOINTS))
    msg.header.stamp = seconds_to_stamp(stamp)
    return msg


def frame(stamp, camera):
    return rgb_to_image(np.full((48, 64, 3), 7, np.uint8), seconds_to_stamp(stamp), camera)


def test_each_input_is_subscribed_with_its_type_and_qos():
    inputs, node, _, subscriptions = make_inputs(
        camera_transports=['raw', 'compressed', 'raw'])
    assert subscriptions == [topic for _, topic, _ in node.subscriptions]
    assert [(msg_type, topic) for msg_type, topic, _ in node.subscriptions] == [
        (Image, 'camera/front/image_raw'), (CompressedImage, 'camera/side/image_raw/compressed'),
        (Image, 'camera/wrist/image_raw'), (JointState, 'joint_states'),
        (String, 'instruction'), (String, 'instruction'),
        (Bool, '~/estop'), (Bool, '~/estop'), (Bool, '~/estop')]
    qos = [profile for _, _, profile in node.subscriptions]
    assert all(profile is qos_profile_sensor_data for profile in qos[:4])
    assert [(p.reliability, p.durability) for p in qos[4:6]] == [
        (ReliabilityPolicy.RELIABLE, DurabilityPolicy.TRANSIENT_LOCAL),
        (ReliabilityPolicy.RELIABLE, DurabilityPolicy.VOLATILE)]
    assert qos[-1].reliability == ReliabilityPolicy.BEST_EFFORT


def test_a_new_instruction_starts_an_epoch_the_same_one_again_does_not():
    inputs, node, told, _ = make_inputs()
    inputs.instruction_callback(String(data='pick up the cube'))
    inputs.instruction_callback(String(data='  pick up the cube '))  # the same, stripped
    inputs.instruction_callback(String(data='place it'))
    assert told.epochs == [1, 2] and inputs.epoch == 2 and inputs.instruction == 'place it'
    assert [level for level, _, _ in node.logged] == ['info', 'info']


def test_a_rejected_message_is_counted_per_source_and_reason_and_logged_throttled():
    inputs, node, told, _ = make_inputs()
    inputs.instruction_callback(String(data='   '))
    inputs.joint_state_callback(joint_state(T + 1.0))          # beyond max_future_stamp 0.5 s
    inputs.image_callback(0, 'front', frame(T - 10.0, 'front'))  # beyond observation_timeout
    assert inputs.rejections == {'instruction: empty instruction': 1,
                                 'joint_states: stamp in the future': 1,
                                 'camera front: stamp too old': 1}
    assert inputs.counters['inputs_rejected'] == 3 and inputs.last_rejection > 0.0
    assert [(level, throttle) for level, _, throttle in node.logged] == [
        ('error', LOG_THROTTLE_S)] * 3
    assert node.logged[-1][1].endswith('(rejected so far: 3)')
    assert told.epochs == [] and told.frames == [] and len(inputs.joint_buffer) == 0


def test_stamps_are_not_judged_before_the_ros_clock_runs():
    inputs, _, _, _ = make_inputs(clock=0.0)                   # use_sim_time before /clock
    inputs.joint_state_callback(joint_state(T))
    assert inputs.counters['inputs_rejected'] == 0 and inputs.last_joint_state_time == T


def test_a_matched_set_is_an_observation_once_joint_states_and_an_instruction_are_there():
    inputs, node, told, _ = make_inputs()
    first, second = T - 0.1, T - 0.05
    for index, camera in enumerate(CAMERAS):
        inputs.image_callback(index, camera, frame(first, camera))
    assert told.observations == [] and inputs.counters['observations_dropped'] == 1
    assert node.logged == [('warning', 'observation dropped: no joint state at the '
                            'observation stamp', LOG_THROTTLE_S)]
    inputs.joint_state_callback(joint_state(second - 0.01, 0.1))
    inputs.joint_state_callback(joint_state(second + 0.01, 0.3))
    inputs.instruction_callback(String(data='pick up the cube'))
    for index, camera in enumerate(CAMERAS):
        inputs.image_callback(index, camera, frame(second, camera))
    [observation] = told.observations
    stamp_ns = stamp_to_nanoseconds(seconds_to_stamp(second))
    assert observation.stamp == pytest.approx(second, abs=1e-9)
    assert observation.stamp_ns == stamp_ns
    # Each frame as offered to the node, keyed by camera, stamp and arrival count.
    assert [key for _, _, key in told.frames[3:]] == list(observation.frame_keys) == [
        (camera, stamp_ns, 2) for camera in CAMERAS]
    assert observation.state == pytest.approx([0.2] * len(SO101_JOINTS))
    assert observation.instruction == 'pick up the cube' and observation.epoch == 1
    assert inputs.counters == {'observations_synced': 1, 'observations_dropped': 1,
                               'inputs_rejected': 0}
    assert inputs.last_observation_stamp == observation.stamp and len(inputs.skews) == 2


def test_a_set_matched_in_an_older_epoch_is_not_handed_on():
    inputs, _, told, _ = make_inputs()
    inputs.joint_state_callback(joint_state(T - 0.01))
    inputs.instruction_callback(String(data='pick up the cube'))
    for index, camera in enumerate(CAMERAS[:2]):
        inputs.image_callback(index, camera, frame(T - 0.005, camera))
    with inputs._lock:
        matched = inputs.sync.add(2, T - 0.005, (np.zeros((48, 64, 3), np.uint8),
                                                 ('wrist', 0, 1)))
        epoch = inputs.epoch
    inputs.instruction_callback(String(data='place it'))
    inputs.on_synchronized(matched, epoch)
    assert told.observations == [] and inputs.counters['observations_dropped'] == 0


def test_a_new_time_base_drops_what_was_stored_and_starts_an_epoch():
    inputs, _, _, _ = make_inputs()
    inputs.joint_state_callback(joint_state(T - 0.01))
    inputs.image_callback(0, 'front', frame(T - 0.01, 'front'))
    assert len(inputs.joint_buffer) == 1 and inputs.sync.queued(0) == 1
    with inputs._lock:
        assert inputs.new_time_base() == 1
    assert len(inputs.joint_buffer) == 0 and inputs.sync.queued(0) == 0
    assert inputs.last_joint_state_time is None and inputs.epoch == 1
    inputs.reset()
    assert inputs.epoch == 0 and inputs.counters['inputs_rejected'] == 0


def test_only_a_true_estop_message_is_told():
    inputs, _, told, _ = make_inputs()
    inputs.estop_callback(Bool(data=False))
    inputs.estop_callback(Bool(data=True))
    assert told.estops == 1
