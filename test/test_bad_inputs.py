# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Bad-input matrix through the running node: every case rejected, counted, logged, survived.

The message cases share one node start (module fixture) to keep CI time down; each case checks
that its `rejected <source>: <reason>` counter in /diagnostics and `inputs_rejected` in ~/status
grow. Invalid start-up parameters run as separate processes; live parameter changes go through
the node's SetParameters service.
"""
import math
import time

import cv2
import numpy as np
import pytest
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, SetParameters
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String
from test_conversions import jpeg_header_only, png_header_only
from test_node_integration import check_command, ControlNodeHarness

from pi0_ros.conversions import seconds_to_stamp
from pi0_ros.msg import PolicyStatus
from pi0_ros.node import LOG_THROTTLE_S
from pi0_ros.parameters import SO101_JOINTS
from pi0_ros.tools.domain import claim_domain_id, release_domain_id
from rosutil import RosProcess, RosTestNode

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MAX_WIDTH, MAX_HEIGHT = 640, 480
INSTRUCTION = 'pick up the red cube'


class _Starter:
    """A `start_process` for a module-scoped fixture (the conftest one is per test)."""

    def __init__(self, domain_id, log_dir):
        self.domain_id, self.log_dir, self.processes = domain_id, log_dir, []

    def __call__(self, module, *, parameters=None, name=None):
        process = RosProcess(module, domain_id=self.domain_id, parameters=parameters,
                             log_path=self.log_dir / f'{name or module}.log')
        self.processes.append(process)
        return process


@pytest.fixture(scope='module')
def node_under_test(tmp_path_factory):
    """One running node (front/side raw, wrist compressed) fed by the stand-in robot."""
    domain_id = claim_domain_id()
    ros = RosTestNode(domain_id, name='pi0_ros_bad_inputs')
    starter = _Starter(domain_id, tmp_path_factory.mktemp('bad_inputs'))
    try:
        harness = ControlNodeHarness(
            starter, ros, compressed=('wrist',),
            parameters={'camera_transports': ['raw', 'raw', 'compressed'],
                        'max_image_width': MAX_WIDTH, 'max_image_height': MAX_HEIGHT})
        harness.feeder.say(INSTRUCTION)
        harness.wait_following()
        yield harness
        assert harness.process.returncode is None, 'the node died during the bad-input cases'
        for _, msg in harness.trajectories:
            check_command(msg)
    finally:
        for process in starter.processes:
            process.stop()
        ros.close()
        release_domain_id(domain_id)


def rejection_counts(harness):
    """Return {'<source>: <reason>': count} from the newest inputs diagnostics."""
    for _, array in reversed(harness.diagnostics):
        for status in array.status:
            if status.name.endswith(': inputs'):
                return {kv.key[len('rejected '):]: int(kv.value) for kv in status.values
                        if kv.key.startswith('rejected ')}
    return {}


def stamp(harness, offset=0.0):
    now = harness.ros.node.get_clock().now().nanoseconds * 1e-9
    return seconds_to_stamp(now + offset)


def raw_image(harness, *, width=32, height=24, encoding='rgb8', step=None, data=None,
              offset=0.0):
    step = width * 3 if step is None else step
    msg = Image(width=width, height=height, encoding=encoding, step=step,
                data=bytes(step * height) if data is None else data)
    msg.header.stamp = stamp(harness, offset)
    msg.header.frame_id = 'front'
    return msg


def compressed(harness, data, image_format='jpeg'):
    msg = CompressedImage(format=image_format, data=data)
    msg.header.stamp = stamp(harness)
    msg.header.frame_id = 'wrist'
    return msg


def joint_state(harness, names=SO101_JOINTS, positions=None, offset=0.0):
    positions = [0.0] * len(names) if positions is None else positions
    msg = JointState(name=list(names), position=[float(p) for p in positions])
    msg.header.stamp = stamp(harness, offset)
    return msg


def png_bytes(width, height):
    return cv2.imencode('.png', np.zeros((height, width, 3), np.uint8))[1].tobytes()


# (case id, topic key, message factory, counter key as '<source>: <reason>')
MESSAGE_CASES = [
    ('encoding-yuv422', 'front', lambda h: raw_image(h, encoding='yuv422', step=64),
     'camera front: unsupported encoding'),
    ('encoding-16UC1', 'front', lambda h: raw_image(h, encoding='16UC1', step=64),
     'camera front: unsupported encoding'),
    ('encoding-empty', 'side', lambda h: raw_image(h, encoding=''),
     'camera side: unsupported encoding'),
    ('step-too-small', 'front', lambda h: raw_image(h, step=10),
     'camera front: inconsistent image size'),
    ('data-truncated', 'front', lambda h: raw_image(h, data=bytes(32 * 3 * 24 - 100)),
     'camera front: inconsistent image size'),
    ('data-too-long', 'side', lambda h: raw_image(h, data=bytes(32 * 3 * 24 + 7)),
     'camera side: inconsistent image size'),
    ('zero-size', 'front', lambda h: raw_image(h, width=0, height=0, data=b''),
     'camera front: empty image'),
    ('huge-header', 'front', lambda h: raw_image(h, width=100000, height=100000, step=300000,
                                                 data=bytes(16)),
     'camera front: image too large'),
    ('over-max-width', 'side', lambda h: raw_image(h, width=MAX_WIDTH + 64, height=8),
     'camera side: image too large'),
    # Valid as a message, refused by the engine (resized to 224 it would be 0 rows high): an
    # input rejection, not an engine failure.
    ('thin-640x2', 'front', lambda h: raw_image(h, width=MAX_WIDTH, height=2),
     'by the engine'),
    ('stamp-far-future', 'front', lambda h: raw_image(h, offset=3600.0),
     'camera front: stamp in the future'),
    ('stamp-far-past', 'front', lambda h: raw_image(h, offset=-3600.0),
     'camera front: stamp too old'),
    ('corrupt-jpeg', 'wrist', lambda h: compressed(h, b'\xff\xd8\xff' + bytes(200)),
     'camera wrist: corrupt image'),
    ('compressed-format-bmp', 'wrist', lambda h: compressed(h, b'BM' + bytes(60), 'bmp'),
     'camera wrist: unsupported encoding'),
    ('compressed-empty', 'wrist', lambda h: compressed(h, b''), 'camera wrist: empty image'),
    ('png-over-max-size', 'wrist',
     lambda h: compressed(h, png_bytes(MAX_WIDTH * 2, MAX_HEIGHT), 'png'),
     'camera wrist: image too large'),
    # Small messages whose headers claim huge images: OpenCV raised out of the callback (the node
    # died) or decoded for seconds; the size in the header stops them now.
    ('png-header-claims-40000x40000', 'wrist',
     lambda h: compressed(h, png_header_only(40000, 40000), 'png'),
     'camera wrist: image too large'),
    ('jpeg-header-claims-65000x65000', 'wrist',
     lambda h: compressed(h, jpeg_header_only(65000, 65000)), 'camera wrist: image too large'),
    ('joints-unknown-names', 'joints',
     lambda h: joint_state(h, names=[f'joint_{i}' for i in range(6)]),
     'joint_states: missing joints'),
    ('joints-missing-one', 'joints', lambda h: joint_state(h, names=SO101_JOINTS[:-1]),
     'joint_states: missing joints'),
    ('joints-duplicated', 'joints',
     lambda h: joint_state(h, names=SO101_JOINTS + SO101_JOINTS[:1]),
     'joint_states: duplicate joint names'),
    ('joints-nan', 'joints',
     lambda h: joint_state(h, positions=[0.0] * 5 + [math.nan]),
     'joint_states: non-finite joint state'),
    ('joints-inf', 'joints',
     lambda h: joint_state(h, positions=[math.inf] + [0.0] * 5),
     'joint_states: non-finite joint state'),
    ('joints-beyond-float32', 'joints',
     lambda h: joint_state(h, positions=[1e39] + [0.0] * 5),
     'joint_states: non-finite joint state'),
    ('joints-length-mismatch', 'joints', lambda h: joint_state(h, positions=[0.0] * 4),
     'joint_states: mismatched joint state lengths'),
    ('joints-stamp-future', 'joints', lambda h: joint_state(h, offset=600.0),
     'joint_states: stamp in the future'),
    ('instruction-empty', 'instruction', lambda h: String(data='  \n '),
     'instruction: empty instruction'),
    ('instruction-10kB', 'instruction', lambda h: String(data='x' * 10_000),
     'instruction: instruction too long'),
    ('instruction-replacement-char', 'instruction',
     lambda h: String(data='pick up the \ufffd cube'), 'instruction: invalid instruction'),
]


def publisher(harness, key):
    """Return the feeder's publisher for key (already matched with the node's subscriptions)."""
    feeder = harness.feeder
    if key == 'joints':
        return feeder.joint_pub
    if key == 'instruction':
        return feeder.instruction_pub
    return feeder.image_pubs[key]


def send_until_counted(harness, key, factory, counter, timeout=10.0):
    """Publish a bad message (a few times: best effort may drop one) until it is counted."""
    ros = harness.ros
    before = rejection_counts(harness).get(counter, 0)
    total_before = harness.latest_status().inputs_rejected
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = factory(harness)
        publisher(harness, key).publish(msg)
        if counter == 'by the engine':
            # The frame reaches the engine only in a camera set: with the other cameras' frames
            # of its stamp it forms one of its own. Alone, it would pair with them only when
            # the feeder's own frame of theirs was lost (the sync takes the set of least skew).
            for name, other in harness.feeder.image_pubs.items():
                if name != key:
                    other.publish(harness.feeder.image_message(name, msg.header.stamp))
        if ros.spin_until(lambda: rejection_counts(harness).get(counter, 0) > before, 0.4,
                          harness.process):
            break
    assert rejection_counts(harness).get(counter, 0) > before, \
        f'{counter} not counted\n' + harness.process.output()[-2000:]
    assert ros.spin_until(lambda: harness.latest_status().inputs_rejected > total_before, 2.0,
                          harness.process)


def test_one_bad_message_repeated_logs_throttled(node_under_test):
    # Runs first: no other case has used this reason yet (the log is throttled per reason).
    harness = node_under_test
    ros = harness.ros
    counter = 'joint_states: mismatched joint state lengths'
    before = rejection_counts(harness).get(counter, 0)
    started = time.monotonic()
    # Best effort: on a busy machine some are lost, so send until ten were counted.
    while rejection_counts(harness).get(counter, 0) < before + 10:
        assert time.monotonic() - started < 20.0, 'fewer than 10 rejections counted in 20 s'
        harness.feeder.joint_pub.publish(joint_state(harness, positions=[0.0] * 3))
        ros.spin_for(0.02)
    elapsed = time.monotonic() - started
    ros.spin_for(0.3)
    lines = [line for line in harness.process.output().splitlines()
             if 'message: mismatched joint state lengths' in line]
    # One line per throttle period at most.
    assert 1 <= len(lines) <= 2 + int(elapsed / LOG_THROTTLE_S), (lines, elapsed)


@pytest.mark.parametrize('key, factory, counter',
                         [case[1:] for case in MESSAGE_CASES],
                         ids=[case[0] for case in MESSAGE_CASES])
def test_bad_message_rejected_counted_logged_survived(node_under_test, key, factory,
                                                      counter):
    harness = node_under_test
    send_until_counted(harness, key, factory, counter)
    # The error is throttled per reason: an earlier case with the same reason may have logged it.
    # The count is seen before the line reaches the log file: wait for the line.
    if counter == 'by the engine':  # the worker's warning, with the engine's reason
        level, words = '[WARN]', ('observation rejected by the engine', 'too thin')
    else:
        level, words = '[ERROR]', (f"message: {counter.split(': ', 1)[1]}",)

    def logged():
        return any(line.startswith(level) and all(word in line for word in words)
                   for line in harness.process.output().splitlines())
    assert harness.ros.spin_until(logged, 5.0, harness.process), words
    assert harness.process.returncode is None
    assert harness.latest_status().engine_state != PolicyStatus.ENGINE_FAILED


def test_invalid_utf8_instruction_cannot_be_sent(node_under_test):
    # rclpy encodes str as UTF-8 and refuses lone surrogates, so invalid UTF-8 never reaches
    # the wire from Python (a C++ publisher could send it; the node's check for U+FFFD covers
    # what a lenient decoder makes of it).
    with pytest.raises(UnicodeEncodeError):
        node_under_test.feeder.instruction_pub.publish(String(data='pick up \udcff'))


def test_still_following_and_commands_valid_after_the_matrix(node_under_test):
    harness = node_under_test
    status = harness.latest_status()
    assert status.inputs_rejected >= len(MESSAGE_CASES)
    # The rejected instructions changed nothing: the first one is still the one in use.
    assert harness.chunks[-1][1].instruction_epoch == 1
    harness.feeder.say(INSTRUCTION)
    harness.wait_following(timeout=10.0)
    count = len(harness.trajectories)
    # 40 more commands (0.8 s at 50 Hz), up to 3 s to arrive (a busy core delays this process).
    assert harness.ros.spin_until(lambda: len(harness.trajectories) >= count + 40, 3.0,
                                  harness.process), harness.report()
    for _, msg in harness.trajectories:
        check_command(msg)


# Live parameter changes ----------------------------------------------------------------------
def _value(python_value):
    if isinstance(python_value, bool):
        return ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=python_value)
    if isinstance(python_value, float):
        return ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=python_value)
    if isinstance(python_value, int):
        return ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=python_value)
    return ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=python_value)


def call(harness, srv_type, name, request):
    client = harness.ros.node.create_client(srv_type, name)
    assert client.wait_for_service(timeout_sec=10.0)
    future = client.call_async(request)
    assert harness.ros.spin_until(future.done, 10.0, harness.process)
    return future.result()


@pytest.mark.parametrize('name, value, why', [
    ('observation_timeout', -1.0, 'observation_timeout'),
    ('observation_timeout', math.nan, 'observation_timeout'),
    ('observation_timeout', 'soon', 'type'),
    ('inference_trigger', 'sometimes', 'inference_trigger'),
    ('sync_max_skew', 10.0, 'sync_max_skew'),
    ('control_rate', 30.0, 'read-only'),
    ('joint_names', 'a', 'read-only'),
    ('device', 'cuda', 'read-only'),
], ids=['range', 'nan', 'type', 'choice', 'skew-range', 'read-only-rate', 'read-only-joints',
        'read-only-device'])
def test_invalid_live_parameter_change_is_refused_with_a_reason(node_under_test, name, value,
                                                                why):
    harness = node_under_test
    result = call(harness, SetParameters, 'pi0_ros/set_parameters', SetParameters.Request(
        parameters=[Parameter(name=name, value=_value(value))])).results[0]
    assert not result.successful
    assert why in result.reason, result.reason
    assert harness.process.returncode is None


def test_valid_live_parameter_changes_are_applied(node_under_test):
    harness = node_under_test
    changes = {'blend_duration': 0.1, 'observation_timeout': 0.8, 'sync_max_skew': 0.04}
    results = call(harness, SetParameters, 'pi0_ros/set_parameters', SetParameters.Request(
        parameters=[Parameter(name=n, value=_value(v)) for n, v in changes.items()])).results
    assert all(r.successful for r in results), [r.reason for r in results]
    values = call(harness, GetParameters, 'pi0_ros/get_parameters',
                  GetParameters.Request(names=list(changes))).values
    assert [v.double_value for v in values] == list(changes.values())
    harness.wait_following(timeout=10.0)


# Invalid parameters at start-up --------------------------------------------------------------
@pytest.mark.parametrize('parameters, named', [
    ({'control_rate': 0.0}, 'control_rate'),
    ({'precision': 'fp8'}, 'precision'),
    ({'device': 'tpu'}, 'device'),
    ({'joint_names': ['a', 'a']}, 'joint_names'),
    ({'position_lower': [0.0, 0.0]}, 'position_lower'),
    ({'camera_transports': ['raw', 'jpeg', 'raw']}, 'camera_transports'),
], ids=['out-of-range', 'bad-choice', 'bad-device', 'duplicate-joints', 'wrong-length',
        'bad-transport'])
def test_invalid_startup_parameter_exits_1_naming_it(start_process, parameters, named):
    process = start_process('pi0_ros.node', parameters={'device': 'cpu', **parameters})
    code = process.wait(timeout=60.0)
    output = process.output()
    assert code == 1, output[-2000:]
    assert named in output, output[-2000:]
    assert 'engine ready' not in output
