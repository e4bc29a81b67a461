# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
`pi0_sim`: the SO-101 MuJoCo simulator as a ROS 2 node.

The touch task (pi0_ros/sim/tasks.py) runs in it: `~/reset_episode` resets to episode k of
`episode_seed` (objects placed, the arm at home), `~/episode` tells how the episode stands (its
instruction, target and outcome, judged by the simulator), and with `publish_instruction` the
episode's instruction is published (latched) on `instruction`, as an operator would.

Threads: a physics thread steps the model paced to the wall clock (times `real_time_factor`),
applies the trajectory follower and judges the episode; a render thread draws the cameras when
the camera timer asks; timers publish joint_states; the trajectory subscription only validates
and stores. All stamps and the follower's time are the node's ROS clock (sim time with
use_sim_time; `/clock` is published from physics time when `publish_clock` is true).
"""
import os
import threading
import time

os.environ.setdefault('MUJOCO_GL', 'egl')

import numpy as np  # noqa: E402
from rcl_interfaces.msg import (  # noqa: E402
    FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType)
import rclpy  # noqa: E402
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup  # noqa: E402
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import qos_profile_sensor_data, QoSProfile, ReliabilityPolicy  # noqa: E402
from rclpy.time import Time  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from pi0_ros.control.follower import InvalidTrajectoryError, TrajectoryFollower  # noqa: E402
from pi0_ros.conversions import trajectory_command  # noqa: E402
from pi0_ros.executors import freeze_loaded_objects, spin_until_shutdown  # noqa: E402
from pi0_ros.msg import EpisodeState  # noqa: E402
from pi0_ros.qos import LATCHED, REPORT_QOS  # noqa: E402
from pi0_ros.sim.scene import CAMERA_NAMES, HOME_POSITION, SimScene  # noqa: E402
from pi0_ros.sim.tasks import EpisodeJudge, make_episode, Outcome, SUCCESS_DISTANCE  # noqa: E402
from pi0_ros.srv import ResetEpisode  # noqa: E402

_NS_PER_S = 1_000_000_000


class SimNode(Node):
    """Simulated SO-101 with cameras, joint states and a JointTrajectory input."""

    def __init__(self, **kwargs):
        super().__init__('pi0_sim', **kwargs)
        self._declare_parameters()
        self._validate_parameters()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._render_request = threading.Event()
        self._scene = SimScene(self._image_width, self._image_height, shadows=self._shadows)
        self._follower = TrajectoryFollower(
            self._scene.joint_names, HOME_POSITION,
            allow_nonzero_velocity_at_trajectory_end=self._allow_nonzero_end_velocity)
        self._judge = None  # of the current episode (set by _start_episode)
        self._rejected_trajectories = 0
        self.frames_published = 0
        self.frames_skipped = 0

        sensor_qos = qos_profile_sensor_data
        self._joint_state_publisher = self.create_publisher(JointState, 'joint_states', sensor_qos)
        self._image_publishers = {
            name: self.create_publisher(Image, f'camera/{name}/image_raw', sensor_qos)
            for name in CAMERA_NAMES}
        self._clock_publisher = (
            self.create_publisher(Clock, '/clock', QoSProfile(depth=1)) if self._publish_clock
            else None)
        self._episode_publisher = self.create_publisher(
            EpisodeState, '~/episode', REPORT_QOS)
        self._instruction_publisher = (
            self.create_publisher(String, 'instruction', LATCHED)
            if self._publish_instruction else None)
        trajectory_qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        self.create_subscription(JointTrajectory, 'arm_controller/joint_trajectory',
                                 self.joint_trajectory_callback, trajectory_qos,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self.create_service(Trigger, '~/reset', self.reset_callback,
                            callback_group=MutuallyExclusiveCallbackGroup())
        self.create_service(ResetEpisode, '~/reset_episode', self.reset_episode_callback,
                            callback_group=MutuallyExclusiveCallbackGroup())
        self.create_timer(1.0 / self._episode_state_rate, self.episode_timer_callback,
                          callback_group=MutuallyExclusiveCallbackGroup())
        with self._lock:
            self._start_episode(0)
        self.create_timer(1.0 / self._joint_state_rate, self.joint_state_timer_callback,
                          callback_group=MutuallyExclusiveCallbackGroup())
        self.create_timer(1.0 / self._camera_rate, self.camera_timer_callback,
                          callback_group=MutuallyExclusiveCallbackGroup())

        self._physics_thread = threading.Thread(target=self._physics_loop, name='pi0_sim_physics',
                                                daemon=True)
        self._render_thread = threading.Thread(target=self._render_loop, name='pi0_sim_render',
                                               daemon=True)
        self._physics_thread.start()
        self._render_thread.start()
        self.get_logger().info(
            f'SO-101 simulator up: cameras {list(CAMERA_NAMES)} {self._image_width}x'
            f'{self._image_height} @ {self._camera_rate} Hz, joint_states @ '
            f'{self._joint_state_rate} Hz, real_time_factor {self._real_time_factor}')

    def _declare_parameters(self):
        def descriptor(text, *, floating=None, integer=None, kind=None):
            return ParameterDescriptor(
                description=text, read_only=True, type=kind or ParameterType.PARAMETER_NOT_SET,
                floating_point_range=[floating] if floating else [],
                integer_range=[integer] if integer else [])

        self.declare_parameter('camera_rate', 15.0, descriptor(
            'Camera frames per second (per camera).',
            floating=FloatingPointRange(from_value=0.1, to_value=120.0)))
        self.declare_parameter('image_width', 640, descriptor(
            'Camera image width in pixels.', integer=IntegerRange(from_value=16, to_value=4096)))
        self.declare_parameter('image_height', 480, descriptor(
            'Camera image height in pixels.', integer=IntegerRange(from_value=16, to_value=4096)))
        self.declare_parameter('joint_state_rate', 200.0, descriptor(
            'joint_states messages per second (>= 100).',
            floating=FloatingPointRange(from_value=100.0, to_value=1000.0)))
        self.declare_parameter('real_time_factor', 1.0, descriptor(
            'Simulated seconds per wall-clock second.',
            floating=FloatingPointRange(from_value=0.01, to_value=10.0)))
        self.declare_parameter('publish_clock', False, descriptor(
            'Publish /clock from physics time (for use_sim_time).'))
        self.declare_parameter('shadows', False, descriptor(
            'Render shadows (about 6x slower frames on a CPU renderer).'))
        self.declare_parameter('allow_nonzero_velocity_at_trajectory_end', False, descriptor(
            'Accept trajectories whose last point has a non-zero velocity (as JTC).'))
        self.declare_parameter('episode_seed', 0, descriptor(
            'Base seed of the task episodes (episode k places the objects from [seed, k]).',
            integer=IntegerRange(from_value=0, to_value=2**31 - 1)))
        self.declare_parameter('episode_timeout', 15.0, descriptor(
            'Seconds after which a running episode ends as a timeout (0 = never).',
            floating=FloatingPointRange(from_value=0.0, to_value=3600.0)))
        self.declare_parameter('episode_state_rate', 10.0, descriptor(
            '~/episode messages per second (also one at each reset and outcome).',
            floating=FloatingPointRange(from_value=0.1, to_value=100.0)))
        self.declare_parameter('publish_instruction', False, descriptor(
            "Publish each episode's instruction (latched) on instruction, as an operator."))

    def _validate_parameters(self):
        def value(name):
            return self.get_parameter(name).value

        self._camera_rate = float(value('camera_rate'))
        self._image_width = int(value('image_width'))
        self._image_height = int(value('image_height'))
        self._joint_state_rate = float(value('joint_state_rate'))
        self._real_time_factor = float(value('real_time_factor'))
        self._publish_clock = bool(value('publish_clock'))
        self._shadows = bool(value('shadows'))
        self._allow_nonzero_end_velocity = bool(value('allow_nonzero_velocity_at_trajectory_end'))
        self._episode_seed = int(value('episode_seed'))
        self._episode_timeout = float(value('episode_timeout'))
        self._episode_state_rate = float(value('episode_state_rate'))
        self._publish_instruction = bool(value('publish_instruction'))
        checks = [
            ('camera_rate', self._camera_rate, 0.1 <= self._camera_rate <= 120.0),
            ('image_width', self._image_width, 16 <= self._image_width <= 4096),
            ('image_height', self._image_height, 16 <= self._image_height <= 4096),
            ('joint_state_rate', self._joint_state_rate, 100.0 <= self._joint_state_rate <= 1000),
            ('real_time_factor', self._real_time_factor, 0.01 <= self._real_time_factor <= 10.0),
            ('episode_seed', self._episode_seed, 0 <= self._episode_seed < 2**31),
            ('episode_timeout', self._episode_timeout, 0.0 <= self._episode_timeout <= 3600.0),
            ('episode_state_rate', self._episode_state_rate,
             0.1 <= self._episode_state_rate <= 100.0),
        ]
        for name, bad, ok in checks:
            if not ok:
                raise ValueError(f'parameter {name} out of range: {bad!r}')
        # Physics time is the node's clock only with /clock published and use_sim_time on;
        # otherwise stamps and the trajectory follower run on the wall clock.
        self._physics_clock = self._publish_clock and bool(value('use_sim_time'))
        if self._real_time_factor != 1.0 and not self._physics_clock:
            raise ValueError(f'real_time_factor {self._real_time_factor!r} needs publish_clock '
                             'and use_sim_time: on the wall clock the trajectories would run '
                             f'{1.0 / self._real_time_factor:.2f}x as fast as the physics')

    def _now_seconds(self) -> float:
        return self.get_clock().now().nanoseconds / _NS_PER_S

    # Callbacks: fast, under the lock.

    def joint_trajectory_callback(self, msg: JointTrajectory):
        """Validate and hand a trajectory to the follower; log rejections (throttled)."""
        try:
            command = trajectory_command(msg)
            with self._lock:
                self._follower.set_trajectory(command, self._now_seconds())
        except InvalidTrajectoryError as error:
            self._rejected_trajectories += 1
            self.get_logger().warn(
                f'rejected trajectory ({self._rejected_trajectories} so far): {error}',
                throttle_duration_sec=2.0)

    def reset_callback(self, request, response):
        """Start the current episode again: the arm at home, its objects where it placed them."""
        with self._lock:
            episode = self._start_episode(self._judge.episode.index)
        self._announce(episode)
        response.success = True
        response.message = f'arm at home pose, episode {episode.index} restarted'
        return response

    def reset_episode_callback(self, request, response):
        """Reset to episode `request.episode`: objects placed for it, the arm at home."""
        with self._lock:
            episode = self._start_episode(int(request.episode))
        self._announce(episode)
        response.success = True
        response.message = f'episode {episode.index} of seed {episode.base_seed}'
        response.instruction = episode.instruction
        response.target = episode.target
        return response

    def _start_episode(self, index):
        """Place episode `index` and restart its judge (called under the lock)."""
        episode = make_episode(index, self._episode_seed)
        self._scene.reset(HOME_POSITION, episode.placements)
        now = self._judge_time()
        self._follower.hold(HOME_POSITION, self._now_seconds())
        self._judge = EpisodeJudge(episode, now, self._episode_timeout)
        return episode

    def _announce(self, episode):
        """Publish a new episode's state, and its instruction where enabled."""
        if self._instruction_publisher is not None:
            self._publish_safely(self._instruction_publisher, String(data=episode.instruction))
        self.episode_timer_callback()

    def _stamp(self):
        """
        Return the stamp of the state simulated now (called under the lock).

        With sim time, the physics time itself: the node's clock only hears /clock every few
        steps, which would put frames and joint states up to a /clock period off their state.
        """
        if self._physics_clock:
            return Time(nanoseconds=int(round(self._scene.time * _NS_PER_S))).to_msg()
        return self.get_clock().now().to_msg()

    def _judge_time(self):
        """Return the time the episode judge runs on: physics time with sim time, else ROS."""
        return self._scene.time if self._physics_clock else self._now_seconds()

    def episode_timer_callback(self):
        """Publish how the current episode stands."""
        with self._lock:
            judge = self._judge
            elapsed = self._judge_time() - judge.start_time
            target = self._scene.object_positions()[judge.episode.target]
            msg = EpisodeState()
            msg.header.stamp = self._stamp()
            msg.episode = judge.episode.index
            msg.seed = judge.episode.base_seed
            msg.instruction = judge.episode.instruction
            msg.target = judge.episode.target
            msg.outcome = int(judge.outcome)
            msg.elapsed = float(elapsed)
            msg.outcome_time = -1.0 if judge.outcome_time is None else judge.outcome_time
            msg.timeout = judge.timeout
            msg.target_position = target.tolist()
            msg.target_distance = float(judge.target_distance)
            msg.success_distance = SUCCESS_DISTANCE
        self._publish_safely(self._episode_publisher, msg)

    def joint_state_timer_callback(self):
        """Publish the six joint positions and velocities."""
        with self._lock:
            position = self._scene.joint_positions()
            velocity = self._scene.joint_velocities()
            stamp = self._stamp()
        msg = JointState()
        msg.header.stamp = stamp
        msg.name = list(self._scene.joint_names)
        msg.position = position.tolist()
        msg.velocity = velocity.tolist()
        self._publish_safely(self._joint_state_publisher, msg)

    def camera_timer_callback(self):
        """Ask the render thread for a frame of every camera (skipped while it is busy)."""
        if self._render_request.is_set():
            self.frames_skipped += 1
        self._render_request.set()

    # Threads.

    def _physics_loop(self):
        timestep = self._scene.timestep
        wall_start = time.monotonic()
        sim_start = self._scene.time
        clock_period = 1.0 / self._joint_state_rate
        last_clock = -clock_period
        while not self._stop.is_set():
            with self._lock:
                target = sim_start + (time.monotonic() - wall_start) * self._real_time_factor
                steps = int((target - self._scene.time) / timestep)
                if steps > 250:  # more than 0.5 s behind: do not try to catch up
                    self.get_logger().warn('physics fell behind real time; skipping ahead',
                                           throttle_duration_sec=5.0)
                    wall_start = time.monotonic()
                    sim_start = self._scene.time
                    steps = 1
                if self._scene.time < sim_start:  # reset moved physics time back
                    wall_start, sim_start = time.monotonic(), self._scene.time
                for _ in range(max(steps, 0)):
                    # With sim time, the time this step stands for (the node's clock only
                    # hears /clock every few steps); else the wall clock.
                    now = (self._scene.time if self._physics_clock
                           else self._now_seconds())
                    position, _velocity = self._follower.sample(now)
                    self._scene.set_position_targets(position)
                    self._scene.step()
                judge = self._judge
                decided = judge.outcome != Outcome.RUNNING
                judge.update(self._judge_time(), self._scene.tool_position(),
                             self._scene.object_positions())
                sim_time = self._scene.time
            if not decided and judge.outcome != Outcome.RUNNING:
                self.episode_timer_callback()  # the outcome at once, not at the next tick
            # /clock at the joint-state rate of sim time: every subscriber (this node's time
            # source included) handles each message in Python, so more costs real time.
            if (self._clock_publisher is not None
                    and abs(sim_time - last_clock) >= clock_period - 1e-9):
                last_clock = sim_time
                self._publish_safely(self._clock_publisher, Clock(
                    clock=Time(nanoseconds=int(round(sim_time * _NS_PER_S))).to_msg()))
            self._stop.wait(timestep / self._real_time_factor)

    def _render_loop(self):
        try:
            while not self._stop.is_set():
                if not self._render_request.wait(timeout=0.1):
                    continue
                self._render_request.clear()
                for name in CAMERA_NAMES:
                    with self._lock:
                        self._scene.prepare_render(name)
                        stamp = self._stamp()
                    pixels = self._scene.render_prepared()
                    self._publish_safely(self._image_publishers[name],
                                         self._image_msg(pixels, stamp, name))
                    self.frames_published += 1
        finally:
            self._scene.close()

    def _publish_safely(self, publisher, msg):
        # On Ctrl-C the context shuts down before destroy_node() stops the threads.
        try:
            publisher.publish(msg)
        except Exception as error:  # noqa: B902 (rclpy raises several types on shutdown)
            if self.context.ok() and not self._stop.is_set():
                raise
            self.get_logger().debug(f'publish during shutdown dropped: {error}')

    def _image_msg(self, pixels: np.ndarray, stamp, frame_id: str) -> Image:
        msg = Image()
        msg.header.stamp = stamp
        msg.header.frame_id = frame_id
        msg.height, msg.width = int(pixels.shape[0]), int(pixels.shape[1])
        msg.encoding = 'rgb8'
        msg.is_bigendian = 0
        msg.step = msg.width * 3
        msg.data = np.ascontiguousarray(pixels).tobytes()
        return msg

    def destroy_node(self):
        """Stop the physics and render threads, then destroy the node."""
        self._stop.set()
        for thread in (self._physics_thread, self._render_thread):
            thread.join(timeout=5.0)
            if thread.is_alive():
                self.get_logger().warn(f'thread {thread.name} did not stop within 5 s')
        return super().destroy_node()


def main(args=None):
    """Run the simulator node until Ctrl-C or shutdown."""
    rclpy.init(args=args)
    node = None
    try:
        node = SimNode()
        freeze_loaded_objects()  # its cameras and joint states do not pause for full passes
        # Physics and rendering have their own threads; the callbacks only copy state, so one
        # executor thread costs the least CPU (rclpy's MultiThreadedExecutor dispatch is heavy).
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        spin_until_shutdown(executor)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass  # while the node was being built
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
