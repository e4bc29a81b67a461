# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The control node's input callbacks called directly, in this process (tiny model on the CPU).

What the DDS tests cannot arrange at will: two frames with one stamp, a joint-state sample that
arrives late, an epoch that changes between a match and its observation. The node, its worker
thread and its engine are the real ones; only the message transport is left out.
"""
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import rclpy
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from pi0_ros.conversions import rgb_to_image, seconds_to_stamp
from pi0_ros.node import Pi0ControlNode
from pi0_ros.parameters import SO101_JOINTS

pytestmark = pytest.mark.integration

CAMERAS = ('front', 'side', 'wrist')
TIMEOUT = 30.0


@pytest.fixture
def node(ros_domain_id):
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=ros_domain_id)
    control_node = Pi0ControlNode(context=context, parameter_overrides=[
        Parameter('device', value='cpu'), Parameter('control_thread_priority', value=0)])
    try:
        control_node.trigger_configure()
        control_node.trigger_activate()
        yield control_node
    finally:
        control_node.trigger_deactivate()
        control_node.trigger_cleanup()   # stops the worker thread, destroys the interfaces
        control_node.destroy_node()
        rclpy.shutdown(context=context)


def now(node):
    return node.get_clock().now().nanoseconds * 1e-9


def joint_state(stamp):
    msg = JointState(name=list(SO101_JOINTS), position=[0.0] * len(SO101_JOINTS))
    msg.header.stamp = seconds_to_stamp(stamp)
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


def test_two_frames_of_one_camera_with_one_stamp_are_not_taken_for_each_other(node):
    submissions = Submissions(node._worker)
    offered = []
    offer = node._worker.offer_frame
    node._worker.offer_frame = lambda *args: (offered.append(args[2]), offer(*args))
    node.instruction_callback(String(data='pick up the cube'))
    t = now(node)
    node.joint_state_callback(joint_state(t - 0.01))
    node.joint_state_callback(joint_state(t + 0.01))
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
    assert node._last_joint_state_time == pytest.approx(t, abs=1e-6)  # ns round trip
    assert node._hold_reason(t + 0.01, t, node._last_joint_state_time) != 'joint states stale'


def test_a_set_matched_before_an_epoch_change_is_not_submitted(node):
    submissions = Submissions(node._worker)
    node.instruction_callback(String(data='pick up the cube'))
    t = now(node)
    node.joint_state_callback(joint_state(t - 0.01))
    node.joint_state_callback(joint_state(t + 0.01))
    for index, camera in enumerate(CAMERAS[:2]):
        node.image_callback(index, camera, frame(50, t, camera))
    with node._lock:
        matched = node._sync.add(2, t, (np.full((48, 64, 3), 50, np.uint8), ('wrist', 0, 1)))
        epoch = node._epoch
    assert matched is not None
    node.instruction_callback(String(data='place it'))         # the epoch changes meanwhile
    node._on_synchronized(matched, epoch)
    assert submissions.observations == []
    node._on_synchronized(matched, node._epoch)                # on the current epoch: submitted
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
