# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Conversions between ROS messages and the plain arrays the engine and control layers use.

Everything that arrives from outside is validated here; a bad message raises `InputRejected`
with a short reason (used as a counter key) and a detail for the log.
"""
import array
from collections import Counter
from dataclasses import dataclass
import math
import struct

from builtin_interfaces.msg import Duration, Time
import cv2
import numpy as np
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

# Raw encodings the node accepts: channels of 8 bits, and the OpenCV conversion to RGB (None:
# already RGB). The channel counts are written here instead of asked from cv_bridge: the PyPI
# cv_bridge (1.13) decodes them from OpenCV 4's type numbers, which OpenCV 5 changed (it reports
# 9 channels for rgb8 there).
RAW_ENCODINGS = {
    'rgb8': (3, None),
    'bgr8': (3, cv2.COLOR_BGR2RGB),
    'rgba8': (4, cv2.COLOR_RGBA2RGB),
    'bgra8': (4, cv2.COLOR_BGRA2RGB),
    'mono8': (1, cv2.COLOR_GRAY2RGB),
}
COMPRESSED_FORMATS = ('jpeg', 'jpg', 'png')
# Bytes per pixel of the largest valid compressed frame: PNG of 16-bit RGBA, stored (not
# deflated), plus the container's headers. Only a bound on what is parsed at all: the size in
# the image's header is what is checked against the maximum before decoding.
MAX_COMPRESSED_BYTES_PER_PIXEL = 8
COMPRESSED_HEADER_ALLOWANCE = 64 * 1024
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
# JPEG start-of-frame markers (baseline, progressive, lossless, ...): 0xC0-0xCF except DHT
# (0xC4), JPG (0xC8) and DAC (0xCC); markers without a length field (RSTn, TEM, SOI).
JPEG_FRAME_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
JPEG_STANDALONE_MARKERS = frozenset(range(0xD0, 0xD9)) | {0x01}
FLOAT32_MAX = float(np.finfo(np.float32).max)


class InputRejected(ValueError):
    """A message that failed validation; `reason` is a short, stable counter key."""

    def __init__(self, reason, detail=''):
        super().__init__(f'{reason}: {detail}' if detail else reason)
        self.reason = reason
        self.detail = detail


def stamp_to_seconds(stamp):
    """Convert a builtin_interfaces/Time to float seconds."""
    return stamp.sec + stamp.nanosec * 1e-9


def stamp_to_nanoseconds(stamp):
    """Convert a builtin_interfaces/Time to integer nanoseconds."""
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def seconds_to_stamp(seconds):
    """Convert float seconds to a builtin_interfaces/Time (to the nanosecond the float holds)."""
    # Whole and fractional seconds apart: seconds * 1e9 near 1.8e9 s (ROS time) keeps only
    # 256 ns steps.
    whole = math.floor(seconds)
    nanoseconds = int(whole) * 1_000_000_000 + int(round((seconds - whole) * 1e9))
    return Time(sec=nanoseconds // 1_000_000_000, nanosec=nanoseconds % 1_000_000_000)


def seconds_to_duration(seconds):
    """Convert non-negative float seconds to a builtin_interfaces/Duration."""
    nanoseconds = int(round(seconds * 1e9))
    return Duration(sec=nanoseconds // 1_000_000_000, nanosec=nanoseconds % 1_000_000_000)


def _check_size(width, height, max_width, max_height):
    if width <= 0 or height <= 0:
        raise InputRejected('empty image', f'{width}x{height}')
    if width > max_width or height > max_height:
        raise InputRejected('image too large',
                            f'{width}x{height} exceeds {max_width}x{max_height}')


def image_to_rgb(msg, max_width, max_height):
    """
    Convert a sensor_msgs/Image to a contiguous uint8 RGB array [H, W, 3].

    Accepts rgb8, bgr8, rgba8, bgra8 and mono8, with row padding (step > width * channels).
    """
    if msg.encoding not in RAW_ENCODINGS:
        raise InputRejected('unsupported encoding',
                            f"'{msg.encoding}' (accepted: {', '.join(RAW_ENCODINGS)})")
    _check_size(msg.width, msg.height, max_width, max_height)
    channels, conversion = RAW_ENCODINGS[msg.encoding]
    row_bytes = msg.width * channels
    if msg.step < row_bytes:
        raise InputRejected('inconsistent image size',
                            f'step {msg.step} < width {msg.width} x {channels} channels')
    if len(msg.data) != msg.step * msg.height:
        raise InputRejected('inconsistent image size',
                            f'{len(msg.data)} bytes of data, expected step {msg.step} x height '
                            f'{msg.height} = {msg.step * msg.height}')
    rows = np.frombuffer(msg.data, dtype=np.uint8).reshape(msg.height, msg.step)
    pixels = rows[:, :row_bytes].reshape(msg.height, msg.width, channels)
    if conversion is None:
        return np.ascontiguousarray(pixels)
    if channels == 1:
        pixels = pixels[:, :, 0]
    return cv2.cvtColor(np.ascontiguousarray(pixels), conversion)


def compressed_image_size(data) -> tuple[int, int]:
    """
    Return (width, height) from a PNG's or JPEG's header (bytes-like data), without decoding.

    Raises InputRejected('corrupt image') when the data is neither or its header is cut short.
    """
    if data[:8] == PNG_SIGNATURE:
        if len(data) < 24 or data[12:16] != b'IHDR':
            raise InputRejected('corrupt image', 'PNG without an IHDR header')
        return struct.unpack('>II', data[16:24])
    if data[:2] == b'\xff\xd8':
        position = 2
        while position + 4 <= len(data):
            if data[position] != 0xFF:
                raise InputRejected('corrupt image', 'JPEG segment without a marker')
            marker = data[position + 1]
            if marker == 0xFF:  # fill byte
                position += 1
                continue
            if marker in JPEG_STANDALONE_MARKERS:
                position += 2
                continue
            if marker in JPEG_FRAME_MARKERS:
                if position + 9 > len(data):
                    break
                height, width = struct.unpack('>HH', data[position + 5:position + 9])
                return width, height
            if marker == 0xDA:  # start of scan before any frame header
                break
            position += 2 + struct.unpack('>H', data[position + 2:position + 4])[0]
        raise InputRejected('corrupt image', 'JPEG without a frame header')
    raise InputRejected('corrupt image', 'data is neither PNG nor JPEG')


def compressed_to_rgb(msg, max_width, max_height):
    """
    Decode a sensor_msgs/CompressedImage (JPEG or PNG) to a uint8 RGB array [H, W, 3].

    The size in the image's header is checked before anything is decoded, so a small message
    that claims a huge image costs nothing. EXIF orientation is ignored: the pixels are used as
    the camera stored them, as for raw images.
    """
    image_format = msg.format.lower()
    if not any(name in image_format for name in COMPRESSED_FORMATS):
        raise InputRejected('unsupported encoding', f"compressed format '{msg.format}'")
    if len(msg.data) == 0:
        raise InputRejected('empty image', 'no compressed data')
    limit = max_width * max_height * MAX_COMPRESSED_BYTES_PER_PIXEL + COMPRESSED_HEADER_ALLOWANCE
    if len(msg.data) > limit:
        raise InputRejected('image too large', f'{len(msg.data)} bytes of {msg.format} data')
    data = np.frombuffer(msg.data, dtype=np.uint8)
    _check_size(*compressed_image_size(memoryview(data)), max_width, max_height)
    try:
        decoded = cv2.imdecode(data,
                               cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    except cv2.error as error:
        raise InputRejected('corrupt image',
                            f'{msg.format} data does not decode: {str(error).strip()[-200:]}')
    if decoded is None:
        raise InputRejected('corrupt image', f'{msg.format} data does not decode')
    height, width = decoded.shape[:2]
    _check_size(width, height, max_width, max_height)
    return cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)


def rgb_to_image(rgb, stamp, frame_id):
    """Build a sensor_msgs/Image (rgb8) from an RGB array (simulator and test publishers)."""
    # Built here rather than with CvBridge.cv2_to_imgmsg: cv_bridge 1.13 (PyPI) calls
    # ndarray.tostring(), which numpy 2.3 removed (the GPU machine has numpy 2.5).
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f'expected an RGB array [H, W, 3], got shape {rgb.shape}')
    height, width = rgb.shape[:2]
    return Image(header=Header(stamp=stamp, frame_id=frame_id), height=height, width=width,
                 encoding='rgb8', is_bigendian=0, step=width * 3, data=rgb.tobytes())


# A measured velocity beyond this multiple of its joint's max_velocity is taken for a driver
# error, not for motion: the message's velocities are ignored (its positions are kept), so that
# no extrapolation carries a start or an observation's state far from the measured positions.
IMPLAUSIBLE_VELOCITY_FACTOR = 2.0


@dataclass(frozen=True)
class JointSample:
    """Joint positions (and velocities when given) in the configured joint order."""

    stamp: float
    positions: np.ndarray
    velocities: np.ndarray | None
    ignored_velocities: str = ''  # why the message's velocities were ignored ('' if not)


class JointStateMapper:
    """Maps sensor_msgs/JointState messages by name into the configured joint order."""

    def __init__(self, joint_names, max_velocity=None):
        """max_velocity: per joint (configured order); velocities far beyond it are ignored."""
        self.joint_names = list(joint_names)
        self._velocity_bound = (None if max_velocity is None else IMPLAUSIBLE_VELOCITY_FACTOR
                                * np.asarray(max_velocity, dtype=np.float64))
        self._cached_names = None
        self._cached_index = None

    def _index_for(self, names):
        names = tuple(names)
        if names == self._cached_names:
            return self._cached_index
        if len(set(names)) != len(names):
            duplicates = sorted(name for name, count in Counter(names).items() if count > 1)
            listed = ', '.join(duplicates[:10])
            raise InputRejected('duplicate joint names', listed + (
                f' and {len(duplicates) - 10} more' if len(duplicates) > 10 else ''))
        position_of = {name: i for i, name in enumerate(names)}
        missing = [name for name in self.joint_names if name not in position_of]
        if missing:
            raise InputRejected('missing joints', ', '.join(missing))
        index = np.array([position_of[name] for name in self.joint_names], dtype=np.intp)
        self._cached_names, self._cached_index = names, index
        return index

    def convert(self, msg):
        """Return a JointSample for the configured joints, or raise InputRejected."""
        if len(msg.position) != len(msg.name):
            raise InputRejected('mismatched joint state lengths',
                                f'{len(msg.name)} names, {len(msg.position)} positions')
        index = self._index_for(msg.name)
        positions = np.asarray(msg.position, dtype=np.float64)[index]
        # Beyond float32's range is as unusable as NaN: the engine computes in float32.
        usable = np.abs(positions) <= FLOAT32_MAX
        if not np.all(usable):
            bad = [self.joint_names[i] for i in np.flatnonzero(~usable)]
            raise InputRejected('non-finite joint state', ', '.join(bad))
        velocities, ignored = None, ''
        if len(msg.velocity) == len(msg.name):
            velocities = np.asarray(msg.velocity, dtype=np.float64)[index]
            if not np.all(np.abs(velocities) <= FLOAT32_MAX):
                velocities = None  # NaN (some drivers' "unknown"), inf: as if absent
            elif self._velocity_bound is not None and np.any(
                    beyond := np.abs(velocities) > self._velocity_bound):
                joint = int(np.flatnonzero(beyond)[0])
                ignored = (f'{self.joint_names[joint]} at {velocities[joint]:.4g}, beyond '
                           f'{IMPLAUSIBLE_VELOCITY_FACTOR:g} x its max_velocity '
                           f'{self._velocity_bound[joint] / IMPLAUSIBLE_VELOCITY_FACTOR:g}')
                velocities = None
        return JointSample(stamp_to_seconds(msg.header.stamp), positions, velocities, ignored)


def validate_instruction(text, max_length):
    """Return the instruction stripped of surrounding whitespace, or raise InputRejected."""
    if not isinstance(text, str):
        raise InputRejected('invalid instruction', 'not a string')
    stripped = text.strip()
    if not stripped:
        raise InputRejected('empty instruction')
    if len(stripped) > max_length:
        raise InputRejected('instruction too long', f'{len(stripped)} > {max_length} characters')
    if '\x00' in stripped or '\ufffd' in stripped:
        raise InputRejected('invalid instruction', 'contains NUL or replacement characters')
    return stripped


def float64_array(values):
    """
    Return values as the array.array('d') a float64[] message field stores.

    The generated setters take an array.array as it is; any other sequence is checked and
    converted element by element in Python, which costs a control tick ~10x more.
    """
    return array.array('d', np.ascontiguousarray(values, dtype=np.float64).tobytes())


def build_joint_trajectory(joint_names, plan_points, stamped=True):
    """
    Build a JointTrajectory from control.PlanPoints.

    stamped: the header stamp is the plan's start time (its time_from_start counts from there,
    on the controller's clock too); else 0 (the controller starts it when it arrives).
    """
    msg = JointTrajectory()
    msg.joint_names = list(joint_names)
    if stamped:
        msg.header.stamp = seconds_to_stamp(plan_points.start_time)
    # Durations rounded to the nanosecond like seconds_to_duration (half to even).
    nanoseconds = np.rint(np.asarray(plan_points.times_from_start, dtype=np.float64)
                          * 1e9).astype(np.int64).tolist()
    msg.points = [
        JointTrajectoryPoint(positions=float64_array(q), velocities=float64_array(v),
                             time_from_start=Duration(sec=ns // 1_000_000_000,
                                                      nanosec=ns % 1_000_000_000))
        for q, v, ns in zip(plan_points.positions, plan_points.velocities, nanoseconds)]
    return msg


def trajectory_command(msg):
    """Return a JointTrajectory message as plain data (a follower's TrajectoryCommand)."""
    from pi0_ros.control.follower import TrajectoryCommand
    return TrajectoryCommand(
        joint_names=list(msg.joint_names), stamp=stamp_to_seconds(msg.header.stamp),
        time_from_start=[stamp_to_seconds(p.time_from_start) for p in msg.points],
        positions=[list(p.positions) for p in msg.points],
        velocities=[list(p.velocities) for p in msg.points],
        accelerations=[list(p.accelerations) for p in msg.points])
