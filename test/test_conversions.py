# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""Message <-> array conversions and the validation of everything that arrives from outside."""
import array
import struct
import zlib

import cv2
import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image, JointState

from pi0_ros.control import PlannerState, PlanPoints, validate_trajectory
from pi0_ros.conversions import (build_joint_trajectory, compressed_image_size,
                                 compressed_to_rgb, float64_array, image_to_rgb, InputRejected,
                                 JointStateMapper, rgb_to_image,
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


def png_header_only(width, height):
    """Return the first bytes of a PNG that claims width x height (no image data)."""
    header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
    chunk = b'IHDR' + header
    return (b'\x89PNG\r\n\x1a\n' + struct.pack('>I', len(header)) + chunk
            + struct.pack('>I', zlib.crc32(chunk)))


def jpeg_header_only(width, height):
    """Return SOI, a baseline frame header for width x height (3 components), EOI."""
    components = b''.join(bytes([index, 0x11, 0]) for index in (1, 2, 3))
    frame = struct.pack('>BHHB', 8, height, width, 3) + components
    return b'\xff\xd8\xff\xc0' + struct.pack('>H', len(frame) + 2) + frame + b'\xff\xd9'


def with_app1_segment(jpeg, payload_size):
    """Return the JPEG with an APP1 (EXIF-like) segment inserted right after SOI."""
    return jpeg[:2] + b'\xff\xe1' + struct.pack('>H', payload_size + 2) + bytes(payload_size) \
        + jpeg[2:]


@pytest.mark.parametrize('encode', [
    lambda bgr: cv2.imencode('.png', bgr)[1].tobytes(),
    lambda bgr: cv2.imencode('.jpg', bgr)[1].tobytes(),
    lambda bgr: cv2.imencode('.jpg', bgr, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes(),
    lambda bgr: with_app1_segment(cv2.imencode('.jpg', bgr)[1].tobytes(), 30000),
], ids=['png', 'jpeg', 'progressive-jpeg', 'jpeg-with-app1'])
def test_compressed_image_size_is_read_from_the_header(encode):
    bgr = np.zeros((37, 53, 3), np.uint8)
    assert compressed_image_size(encode(bgr)) == (53, 37)
    assert compressed_to_rgb(CompressedImage(format='jpeg', data=encode(bgr)),
                             *MAX).shape == (37, 53, 3)


@pytest.mark.parametrize('data', [png_header_only(40000, 40000), png_header_only(2_000_000, 1),
                                  png_header_only(16000, 16000), jpeg_header_only(65000, 65000)],
                         ids=['png-40000x40000', 'png-2000000x1', 'png-16000x16000',
                              'jpeg-65000x65000'])
def test_a_small_message_claiming_a_huge_image_is_rejected_before_decoding(data, monkeypatch):
    # Decoded, these raise cv2.error (beyond OpenCV's own limit: it escaped the node's
    # callback) or take seconds and gigabytes (16000x16000): the header must stop them.
    def no_decoding(*args):
        raise AssertionError('cv2.imdecode ran on an image larger than the maximum')

    monkeypatch.setattr(cv2, 'imdecode', no_decoding)
    with pytest.raises(InputRejected) as error:
        compressed_to_rgb(CompressedImage(format='png', data=data), 640, 480)
    assert error.value.reason == 'image too large'


def test_an_opencv_decoding_error_is_a_rejection(monkeypatch):
    def failing_decode(*args):
        raise cv2.error('OpenCV(4.12.0) imgcodecs: -215:Assertion failed')

    monkeypatch.setattr(cv2, 'imdecode', failing_decode)
    png = cv2.imencode('.png', np.zeros((8, 8, 3), np.uint8))[1].tobytes()
    with pytest.raises(InputRejected) as error:
        compressed_to_rgb(CompressedImage(format='png', data=png), *MAX)
    assert error.value.reason == 'corrupt image' and 'Assertion failed' in error.value.detail


@pytest.mark.parametrize('data', [b'\x89PNG\r\n\x1a\n\x00', b'GIF89a' + bytes(40),
                                  b'\xff\xd8\xff\xe0\x00\x10' + bytes(14) + b'\xff\xda'],
                         ids=['png-cut-short', 'gif', 'jpeg-scan-before-frame'])
def test_compressed_data_without_a_readable_header_is_corrupt(data):
    with pytest.raises(InputRejected) as error:
        compressed_to_rgb(CompressedImage(format='png', data=data), *MAX)
    assert error.value.reason == 'corrupt image'


def test_an_incompressible_png_of_the_largest_accepted_size_is_accepted():
    noise = np.random.default_rng(3).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    data = cv2.imencode('.png', noise)[1].tobytes()
    assert len(data) > 64 * 48 * 3  # larger than the raw pixels
    decoded = compressed_to_rgb(CompressedImage(format='png', data=data), 64, 48)
    assert np.array_equal(decoded, cv2.cvtColor(noise, cv2.COLOR_BGR2RGB))


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
    # A float that holds a time exactly gives it to the nanosecond (seconds * 1e9 would not).
    exact = seconds_to_stamp(1_800_000_000.25)
    assert (exact.sec, exact.nanosec) == (1_800_000_000, 250_000_000)
    carried = seconds_to_stamp(7.9999999999)
    assert (carried.sec, carried.nanosec) == (8, 0)
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


def test_joint_values_beyond_float32_are_unusable():
    mapper = JointStateMapper(JOINTS)
    with pytest.raises(InputRejected) as error:
        mapper.convert(joint_state(JOINTS, [0.0, 1e39, 0.0]))
    assert error.value.reason == 'non-finite joint state' and error.value.detail == 'b'
    sample = mapper.convert(joint_state(JOINTS, [0.0, 3e38, 0.0], [0.0, -1e39, 0.0]))
    assert sample.positions[1] == 3e38 and sample.velocities is None


def test_velocities_far_beyond_the_joint_limits_are_ignored_with_a_reason():
    mapper = JointStateMapper(JOINTS, max_velocity=[1.0, 2.0, 3.0])
    moving = mapper.convert(joint_state(JOINTS, [0.0] * 3, [-1.5, 4.0, 0.0]))  # within 2x
    assert moving.velocities.tolist() == [-1.5, 4.0, 0.0] and moving.ignored_velocities == ''
    garbage = mapper.convert(joint_state(JOINTS, [0.1, 0.2, 0.3], [0.0, 1e6, 0.0]))
    assert garbage.velocities is None and garbage.positions.tolist() == [0.1, 0.2, 0.3]
    assert garbage.ignored_velocities == 'b at 1e+06, beyond 2 x its max_velocity 2'
    unknown = mapper.convert(joint_state(JOINTS, [0.0] * 3, [float('nan'), 0.0, 0.0]))
    assert unknown.velocities is None and unknown.ignored_velocities == ''  # as if absent


def test_many_duplicate_joint_names_are_rejected_with_a_short_detail():
    names = [f'joint_{i % 20000}' for i in range(40000)]
    with pytest.raises(InputRejected) as error:
        JointStateMapper(JOINTS).convert(joint_state(names, [0.0] * len(names)))
    assert error.value.reason == 'duplicate joint names'
    assert error.value.detail.endswith('and 19990 more') and len(error.value.detail) < 200


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
    points = PlanPoints(times, positions, velocities, PlannerState.FOLLOWING, None,
                        start_time=1_800_000_000.25)
    msg = build_joint_trajectory(['a', 'b'], points)
    assert msg.joint_names == ['a', 'b']
    # Stamped with the plan's start: the controller counts time_from_start from there.
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (1_800_000_000, 250_000_000)
    unstamped = build_joint_trajectory(['a', 'b'], points, stamped=False)
    assert unstamped.header.stamp.sec == 0 and unstamped.header.stamp.nanosec == 0
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
