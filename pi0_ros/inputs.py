# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The control node's inputs: camera frames, joint states, the instruction and the e-stop.

NodeInputs subscribes to them and keeps what they bring: the camera synchronizer, the joint-state
buffer, the latched instruction and its epoch, the newest stamps, and the count of rejected
messages with throttled logs. Its subscription callbacks only convert, validate and store, under
the node's lock; what the node does with a frame, an observation, a new epoch or an e-stop it is
told through callbacks, outside the lock.
"""
from collections import Counter, deque
import time

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Bool, String

from pi0_ros.conversions import (compressed_to_rgb, image_to_rgb, InputRejected, JointStateMapper,
                                 stamp_to_nanoseconds, stamp_to_seconds, validate_instruction)
from pi0_ros.qos import AnyPublisherSubscription, sensor_qos, warn_incompatible_publishers
from pi0_ros.sync import ApproximateTimeSync, JointStateBuffer
from pi0_ros.worker import Observation

LOG_THROTTLE_S = 2.0  # seconds between repeats of one warning or error (the node's too)


def _no_later_than(stamp, now):
    """Return an input's stamp capped at its arrival time now (once the ROS clock runs)."""
    return min(stamp, now) if now > 0.0 else stamp


class NodeInputs:
    """
    The control node's input callbacks and the state they keep.

    One per node, for its lifetime: reset() at each configure, then configure() subscribes.
    `lock` is the node's; the node reads under it what the callbacks store: `joint_buffer`,
    `last_joint_state_time` and `last_observation_stamp` (ROS seconds, capped at arrival),
    `instruction`, `epoch`, `counters`, `rejections` (per source and reason), `last_rejection`
    (monotonic seconds) and `skews`.

    Callbacks, all called without the lock: now() returns the ROS time in seconds;
    on_frame(index, rgb, frame_key) gets each valid camera frame before the synchronizer does;
    on_observation(observation) each synchronized observation; on_epoch(epoch) the new epoch
    after an instruction change; on_estop() each true e-stop message.
    """

    def __init__(self, node, lock, *, now, on_frame, on_observation, on_epoch, on_estop):
        self._node = node
        self._lock = lock
        self._now = now
        self._on_frame = on_frame
        self._on_observation = on_observation
        self._on_epoch = on_epoch
        self._on_estop = on_estop
        self._settings = None
        self.sync = None
        self.joint_buffer = None
        self._joint_mapper = None
        # One logger per reason, each throttled on its own; they outlive configure.
        self._rejection_loggers = {}
        self.reset()

    def reset(self):
        """Forget the instruction, the stamps and the counts (a new configure)."""
        self.instruction = None
        self.epoch = 0
        self._time_base = 0  # counts backward clock jumps (inputs read across one are dropped)
        self._last_matched_stamp = None  # of the newest set handed on (sets arrive in order)
        self.last_observation_stamp = None
        self.last_joint_state_time = None
        self._frames_received = Counter()  # frames received per camera index
        self.skews = deque(maxlen=200)
        self.last_rejection = -float('inf')  # monotonic time of the newest rejected input
        self.counters = {'observations_synced': 0, 'observations_dropped': 0,
                         'inputs_rejected': 0}
        self.rejections = {}

    def configure(self, settings, max_velocity, entities):
        """
        Build the synchronizer and the joint-state buffer, and subscribe to the inputs.

        Each subscription is appended to `entities` as it is made, for the node to destroy on
        cleanup (also those of a configure that failed midway).
        """
        self._settings = settings
        self.sync = ApproximateTimeSync(len(settings.camera_names), settings.sync_queue_size,
                                        settings.sync_max_skew)
        self.joint_buffer = JointStateBuffer(
            capacity=400, max_gap=settings.joint_state_max_gap,
            max_extrapolation=settings.joint_state_max_extrapolation,
            max_velocity=max_velocity)
        self._joint_mapper = JointStateMapper(settings.joint_names, max_velocity)
        node = self._node

        # Joint states never wait behind a camera frame; each camera converts on its own.
        joint_group = MutuallyExclusiveCallbackGroup()
        commands_group = MutuallyExclusiveCallbackGroup()

        def warn(topic):
            return warn_incompatible_publishers(node.get_logger(), topic, LOG_THROTTLE_S)

        camera_qos = sensor_qos(settings.camera_reliability)
        for index, (name, topic, transport) in enumerate(zip(
                settings.camera_names, settings.camera_topics, settings.camera_transports)):
            msg_type = CompressedImage if transport == 'compressed' else Image
            entities.append(node.create_subscription(
                msg_type, topic,
                lambda msg, i=index, n=name: self.image_callback(i, n, msg),
                camera_qos, callback_group=MutuallyExclusiveCallbackGroup(),
                event_callbacks=warn(topic)))
        entities.append(
            node.create_subscription(JointState, 'joint_states', self.joint_state_callback,
                                     sensor_qos(settings.joint_state_reliability),
                                     callback_group=joint_group,
                                     event_callbacks=warn('joint_states')))
        # The e-stop and the instruction are heard from any publisher: a latched one (also when
        # it published before this node started) and a default-QoS one alike.
        entities += AnyPublisherSubscription(
            node, String, 'instruction', self.instruction_callback, commands_group,
            incompatible=warn('instruction'), best_effort=False).subscriptions
        entities += AnyPublisherSubscription(
            node, Bool, '~/estop', self.estop_callback, commands_group,
            incompatible=warn('~/estop')).subscriptions

    def update_settings(self, settings):
        """Take live parameter changes (called under the lock)."""
        self._settings = settings
        if self.sync is not None:
            self.sync.max_skew = settings.sync_max_skew

    def new_time_base(self):
        """
        Drop what was stored on the old time base (a backward clock jump); return the new epoch.

        Called under the lock.
        """
        self.sync.clear()
        self.joint_buffer.clear()
        self.last_observation_stamp = None
        self.last_joint_state_time = None
        self._last_matched_stamp = None
        self.epoch += 1
        self._time_base += 1
        return self.epoch

    # Bad input -----------------------------------------------------------------------------
    def _reject(self, error, source):
        """Count a rejected input and log it, throttled per reason."""
        with self._lock:
            self.counters['inputs_rejected'] += 1
            self.last_rejection = time.monotonic()
            key = f'{source}: {error.reason}'
            self.rejections[key] = self.rejections.get(key, 0) + 1
        logger = self._rejection_loggers.get(error.reason)
        if logger is None:
            logger = self._node.get_logger().get_child('input')
            self._rejection_loggers[error.reason] = logger
        logger.error(f'rejected {source} message: {error} (rejected so far: '
                     f"{self.counters['inputs_rejected']})",
                     throttle_duration_sec=LOG_THROTTLE_S)

    def _check_stamp(self, stamp, now, max_age):
        """Reject stamps far in the future or older than max_age (both on the ROS clock)."""
        settings = self._settings
        if now <= 0.0:
            return  # the ROS clock has not started yet (use_sim_time before /clock)
        if stamp > now + settings.max_future_stamp:
            raise InputRejected('stamp in the future', f'{stamp - now:.3f} s ahead of the clock')
        if stamp < now - max_age:
            raise InputRejected('stamp too old', f'{now - stamp:.3f} s behind the clock')

    # Callbacks (convert, validate, store) --------------------------------------------------
    def image_callback(self, index, camera, msg):
        """Convert one camera frame and offer it to the synchronizer."""
        settings = self._settings
        time_base = self._time_base  # before the clock is read (see on_synchronized)
        try:
            if isinstance(msg, CompressedImage):
                rgb = compressed_to_rgb(msg, settings.max_image_width, settings.max_image_height)
            else:
                rgb = image_to_rgb(msg, settings.max_image_width, settings.max_image_height)
            stamp = stamp_to_seconds(msg.header.stamp)
            self._check_stamp(stamp, self._now(), settings.observation_timeout)
        except InputRejected as error:
            self._reject(error, f'camera {camera}')
            return
        with self._lock:
            # The arrival count tells apart two frames of one camera with the same stamp (the
            # synchronizer keeps the later one; the engine must not reuse the earlier one's
            # features for it).
            self._frames_received[index] += 1
            frame_key = (camera, stamp_to_nanoseconds(msg.header.stamp),
                         self._frames_received[index])
        self._on_frame(index, rgb, frame_key)
        with self._lock:
            if time_base != self._time_base:
                return  # judged on the clock before a backward jump: not for the new buffers
            matched = self.sync.add(index, stamp, (rgb, frame_key))
            epoch = self.epoch
        if matched is not None:
            self.on_synchronized(matched, epoch)

    def on_synchronized(self, matched, epoch):
        """Turn a matched set of frames, matched in epoch, into an observation and hand it on."""
        state = self.joint_buffer.at(matched.stamp)
        with self._lock:
            if epoch != self.epoch:
                return  # matched on the time base before a clock jump (or instruction change)
            if self._last_matched_stamp is not None and matched.stamp <= self._last_matched_stamp:
                return  # a newer set went ahead of it (callbacks on several threads)
            self._last_matched_stamp = matched.stamp
            self.skews.append(matched.skew)
            if state is None or self.instruction is None:
                self.counters['observations_dropped'] += 1
                reason = ('no joint state at the observation stamp' if state is None
                          else 'waiting for an instruction on the instruction topic')
            else:
                reason = None
                self.counters['observations_synced'] += 1
                # Its age counts from no later than now: a stamp ahead of the clock (within
                # max_future_stamp) must not keep the observation fresh for longer.
                self.last_observation_stamp = _no_later_than(matched.stamp, self._now())
                # The set's stamp (the newest of its frames), exact to the nanosecond.
                stamp_ns = max(item[1][1] for item in matched.items)
                observation = Observation(
                    stamp=matched.stamp, stamp_ns=stamp_ns,
                    frames=tuple(item[0] for item in matched.items),
                    frame_keys=tuple(item[1] for item in matched.items), state=state,
                    instruction=self.instruction, epoch=self.epoch)
        if reason is not None:
            self._node.get_logger().warning(f'observation dropped: {reason}',
                                            throttle_duration_sec=LOG_THROTTLE_S)
        else:
            self._on_observation(observation)

    def joint_state_callback(self, msg):
        """Map joint states by name into the configured order and buffer them."""
        time_base = self._time_base  # before the clock is read (see image_callback)
        now = self._now()
        try:
            sample = self._joint_mapper.convert(msg)
            self._check_stamp(sample.stamp, now, self._settings.joint_state_timeout + 1.0)
        except InputRejected as error:
            self._reject(error, 'joint_states')
            return
        if sample.ignored_velocities:
            self._node.get_logger().warning(
                f'joint_states: velocities ignored ({sample.ignored_velocities}); the positions '
                'are used, held where extrapolated', throttle_duration_sec=LOG_THROTTLE_S)
        with self._lock:
            if time_base != self._time_base:
                return  # judged on the clock before a backward jump
            if self.joint_buffer.add(sample.stamp, sample.positions, sample.velocities):
                # The newest stamp seen, not the last to arrive: a late sample must not make
                # the joint states look stale; and no later than its arrival: a stamp ahead of
                # the clock must not keep them fresh for longer.
                fresh = _no_later_than(sample.stamp, now)
                newest = self.last_joint_state_time
                self.last_joint_state_time = fresh if newest is None else max(newest, fresh)

    def instruction_callback(self, msg):
        """Latch a new instruction; chunks computed for the previous one are discarded."""
        try:
            text = validate_instruction(msg.data, self._settings.max_instruction_length)
        except InputRejected as error:
            self._reject(error, 'instruction')
            return
        with self._lock:
            if text == self.instruction:
                return
            self.instruction = text
            self.epoch += 1
            epoch = self.epoch
        self._on_epoch(epoch)
        self._node.get_logger().info(f"instruction (epoch {epoch}): '{text[:120]}'")

    def estop_callback(self, msg):
        """Latch a hold on a true e-stop message, until ~/enable is called with true."""
        if msg.data:
            self._on_estop()
