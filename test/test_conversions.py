# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Message <-> array conversions and the validation of everything that arrives from outside."""
import array

import cv2
import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image, JointState

from pi0_ros.control import PlannerState, PlanPoints, validate_trajectory
from pi0_ros.conversions import (build_joint_trajectory, compressed_to_rgb, float64_array,
                                 image_to_rgb, InputRejected, JointStateMapper, rgb_to_image,
                                 seconds_to_duration, seconds_to_stamp, stamp_to_nanoseconds,
                                 stamp_to_seconds, validate_instruction)

RNG = np.random.default_rng(7)
RGB = RNG.integers(0, 256, (5, 7, 3), dtype=np.uint8)
MAX = (64, 64)


def raw(encoding, pixels, step=None):
    height, width = pixels.shape[:2]
    row = pixels.reshape(height, -1)
    step = step or row.shape[1]
    padded = np.zeros((height, step), np.uint8)
    padded[:, :row.shape[1]] = row
    return Image(height=height, width=width, encoding=encoding, step=step,
                 data=padded.tobytes())


@pytest.mark.parametrize('encoding, pixels', [
    ('rgb8', RGB),
    ('bgr8', RGB[:, :, ::-1]),
    ('rgba8', np.dstack([RGB, np.full(RGB.shape[:2], 255, np.uint8)])),
    ('bgra8', np.dstack([RGB[:, :, ::-1], np.full(RGB.shape[:2], 9, np.uint8)])),
])
def test_raw_encodings_convert_to_rgb(encoding, pixels):
    assert np.array_equal(image_to_rgb(raw(encoding, np.ascontiguousarray(pixels)), *MAX), RGB)


def test_mono8_and_padded_rows():
    gray = RGB[:, :, 0].copy()
    out = image_to_rgb(raw('mono8', gray, step=8), *MAX)
    assert out.shape == (5, 7, 3) and np.array_equal(out[:, :, 1], gray)
    assert np.array_equal(image_to_rgb(raw('rgb8', RGB, step=24), *MAX), RGB)


@pytest.mark.parametrize('make, reason', [
    (lambda: raw('yuv422', RGB[:, :, :2].copy()), 'unsupported encoding'),
    (lambda: raw('16UC1', RGB[:, :, :2].copy()), 'unsupported encoding'),
    (lambda: Image(height=5, width=7, encoding='rgb8', step=21, data=bytes(100)),
     'inconsistent image size'),
    (lambda: Image(height=5, width=7, encoding='rgb8', step=20, data=bytes(100)),
     'inconsistent image size'),
    (lambda: Image(height=0, width=0, encoding='rgb8', step=0, data=b''), 'empty image'),
    (lambda: raw('rgb8', np.zeros((65, 10, 3), np.uint8)), 'image too large'),
])
def test_bad_raw_images_are_rejected_with_a_reason(make, reason):
    with pytest.raises(InputRejected) as error:
        image_to_rgb(make(), *MAX)
    assert error.value.reason == reason


def test_compressed_jpeg_and_png_decode_to_rgb():
    bgr = cv2.cvtColor(RGB, cv2.COLOR_RGB2BGR)
    png = CompressedImage(format='rgb8; png compressed bgr8',
                          data=cv2.imencode('.png', bgr)[1].tobytes())
    assert np.array_equal(compressed_to_rgb(png, *MAX), RGB)
    jpeg = CompressedImage(format='jpeg', data=cv2.imencode('.jpg', bgr)[1].tobytes())
    assert compressed_to_rgb(jpeg, *MAX).shape == RGB.shape


@pytest.mark.parametrize('msg, reason', [
    (CompressedImage(format='jpeg', data=b'\xff\xd8\xff\xe0' + bytes(64)), 'corrupt image'),
    (CompressedImage(format='jpeg', data=b''), 'empty image'),
    (CompressedImage(format='h264', data=b'\x00\x00\x01'), 'unsupported encoding'),
    (CompressedImage(format='png', data=cv2.imencode('.png', np.zeros((80, 8, 3), np.uint8))[1]
                     .tobytes()), 'image too large'),
])
def test_bad_compressed_images_are_rejected(msg, reason):
    with pytest.raises(InputRejected) as error:
        compressed_to_rgb(msg, *MAX)
    assert error.value.reason == reason


def test_rgb_to_image_round_trip():
    stamp = seconds_to_stamp(12.25)
    msg = rgb_to_image(RGB, stamp, 'front')
    assert msg.encoding == 'rgb8' and msg.header.frame_id == 'front'
    assert np.array_equal(image_to_rgb(msg, *MAX), RGB)


def test_stamps_and_durations():
    stamp = seconds_to_stamp(1.5e9 + 0.123456789)
    # float seconds near 1.5e9 resolve to ~240 ns.
    assert abs(stamp_to_nanoseconds(stamp) - 1_500_000_000_123_456_789) < 300
    assert abs(stamp_to_seconds(stamp) - (1.5e9 + 0.123456789)) < 1e-6
    duration = seconds_to_duration(0.02)
    assert (duration.sec, duration.nanosec) == (0, 20_000_000)


JOINTS = ['a', 'b', 'c']


def joint_state(names, positions, velocities=()):
    msg = JointState(name=names, position=positions, velocity=list(velocities))
    msg.header.stamp = seconds_to_stamp(3.0)
    return msg


def test_joint_states_are_mapped_by_name():
    mapper = JointStateMapper(JOINTS)
    sample = mapper.convert(joint_state(['c', 'x', 'a', 'b'], [3.0, 9.0, 1.0, 2.0],
                                        [0.3, 0.9, 0.1, 0.2]))
    assert sample.stamp == 3.0
    assert np.array_equal(sample.positions, [1.0, 2.0, 3.0])
    assert np.array_equal(sample.velocities, [0.1, 0.2, 0.3])
    assert mapper.convert(joint_state(JOINTS, [1.0, 2.0, 3.0])).velocities is None


@pytest.mark.parametrize('names, positions, reason', [
    (['a', 'b'], [0.0, 0.0], 'missing joints'),
    (['a', 'b', 'c', 'a'], [0.0] * 4, 'duplicate joint names'),
    (['a', 'b', 'c'], [0.0, 0.0], 'mismatched joint state lengths'),
    (['a', 'b', 'c'], [0.0, float('nan'), 0.0], 'non-finite joint state'),
    (['a', 'b', 'c'], [0.0, float('inf'), 0.0], 'non-finite joint state'),
])
def test_bad_joint_states_are_rejected(names, positions, reason):
    with pytest.raises(InputRejected) as error:
        JointStateMapper(JOINTS).convert(joint_state(names, positions))
    assert error.value.reason == reason


@pytest.mark.parametrize('text, reason', [
    ('', 'empty instruction'), ('  \n\t', 'empty instruction'),
    ('x' * 101, 'instruction too long'), ('pick\x00up', 'invalid instruction'),
])
def test_bad_instructions_are_rejected(text, reason):
    with pytest.raises(InputRejected) as error:
        validate_instruction(text, 100)
    assert error.value.reason == reason


def test_instruction_is_stripped():
    assert validate_instruction('  pick up the cube \n', 100) == 'pick up the cube'


def test_joint_trajectory_from_plan_points():
    times = np.array([0.02, 0.04, 0.06])
    positions = np.array([[0.0, 1.0], [0.1, 1.1], [0.2, 1.2]])
    velocities = np.array([[5.0, 5.0], [5.0, 5.0], [0.0, 0.0]])
    points = PlanPoints(times, positions, velocities, PlannerState.FOLLOWING, None)
    msg = build_joint_trajectory(['a', 'b'], points)
    assert msg.joint_names == ['a', 'b']
    assert msg.header.stamp.sec == 0 and msg.header.stamp.nanosec == 0
    assert [p.time_from_start.nanosec for p in msg.points] == [20_000_000, 40_000_000,
                                                               60_000_000]
    assert [list(p.positions) for p in msg.points] == positions.tolist()
    assert list(msg.points[-1].velocities) == [0.0, 0.0]
    assert validate_trajectory(times, positions, velocities, 2) == []


def test_trajectory_arrays_are_float64_arrays_with_durations_rounded_like_seconds_to_duration():
    rng = np.random.default_rng(1)
    # Times a tick computes (from a clock near 1.8e9 s) and exact half nanoseconds.
    times = np.concatenate([np.cumsum(rng.uniform(0.001, 0.03, 40)),
                            [2.5e-9, 3.5e-9, 1.0000000005, 0.02]])
    positions = rng.standard_normal((times.size, 3))
    velocities = rng.standard_normal((times.size, 3))[:, ::-1]   # not contiguous
    msg = build_joint_trajectory(['a', 'b', 'c'], PlanPoints(
        times, positions, velocities, PlannerState.FOLLOWING, None))
    for point, t, q, v in zip(msg.points, times, positions, velocities):
        assert point.time_from_start == seconds_to_duration(float(t))
        assert isinstance(point.positions, array.array) and point.positions.typecode == 'd'
        assert list(point.positions) == q.tolist() and list(point.velocities) == v.tolist()


def test_float64_array_keeps_every_value_exactly():
    values = np.array([[0.1, -2.5e300], [np.inf, 1e-320]])
    converted = float64_array(values.T)
    assert converted.typecode == 'd' and converted.tolist() == values.T.ravel().tolist()
