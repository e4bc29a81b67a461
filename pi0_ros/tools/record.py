# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
`recorder`: record what the control node sees into a LeRobotDataset, to train a policy on it.

    ros2 run pi0_ros recorder --ros-args --params-file config/pi0_ros.yaml -p output:=/data/ds
    python -m pi0_ros.tools.record --ros-args -p output:=/data/ds -p action_source:=leader

It subscribes to the control node's inputs with the control node's own code (NodeInputs: the
three cameras, raw or compressed, `joint_states` and `instruction`, synchronized with the same
stamp semantics and checks, from the same parameters), so a recorded frame is an observation
the node would have made. Each frame's action is, by `action_source`:
- commanded: the setpoint of the trajectory commanded on `trajectory_topic` at the frame's stamp
  (sampled with joint_trajectory_controller's semantics, as the controller would execute it);
- leader: the joint state of a leader arm on `leader_topic` at the frame's stamp (teleoperation).

`~/start_episode` (pi0_ros/StartEpisode: the task, empty = the latched instruction) and
`~/stop_episode` (std_srvs/SetBool: true saves, false discards) bound the episodes. An episode
whose cameras stop, whose clock jumps back or that fills the disk is discarded, with the reason
in the log and in the stop reply; the episodes saved before stay loadable. On Ctrl-C the episode
under way is discarded and the dataset finalized.
"""
from collections import deque
import copy
import threading

import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory

from pi0_ros.control.follower import InvalidTrajectoryError, TrajectoryFollower
from pi0_ros.conversions import InputRejected, JointStateMapper, trajectory_command
from pi0_ros.executors import spin_until_shutdown
from pi0_ros.inputs import LOG_THROTTLE_S, NodeInputs
from pi0_ros.parameters import descriptor, ParameterError, settings_from_values, Spec, SPECS
from pi0_ros.qos import sensor_qos
from pi0_ros.srv import StartEpisode
from pi0_ros.sync import JointStateBuffer
from pi0_ros.tools.dataset_recorder import DatasetRecorder, RecordingError

NODE_NAME = 'pi0_recorder'
ACTION_SOURCES = ('commanded', 'leader')
# The control node's parameters that shape its inputs: the recorder reads them the same way.
INPUT_PARAMETERS = (
    'camera_names', 'camera_topics', 'camera_transports', 'camera_reliability',
    'max_image_width', 'max_image_height', 'joint_names', 'joint_state_reliability',
    'max_velocity', 'sync_max_skew', 'sync_queue_size', 'joint_state_max_gap',
    'joint_state_max_extrapolation', 'observation_timeout', 'joint_state_timeout',
    'max_future_stamp', 'max_instruction_length')
RECORDER_SPECS = {
    'output': Spec('pi0_ros_dataset', 'Dataset directory (created; an existing LeRobot dataset '
                                      'there is appended to)'),
    'repo_id': Spec('local/pi0_ros', "The dataset's repo id (LeRobot's name for it)"),
    'fps': Spec(30, 'Frames per second of the dataset (its frame grid)', 1, 1000),
    'action_source': Spec('commanded', 'Where actions come from: commanded = the setpoint of '
                                       'the trajectory on trajectory_topic; leader = the joint '
                                       'states of a leader arm on leader_topic'),
    'trajectory_topic': Spec('arm_controller/joint_trajectory', 'JointTrajectory topic of the '
                                                                'commanded arm'),
    'leader_topic': Spec('leader/joint_states', 'JointState topic of the leader arm'),
    'use_videos': Spec(False, "Store the cameras as videos (LeRobot's encoder) instead of "
                              'lossless PNG images'),
    'robot_type': Spec('so101', 'Robot type written into the dataset'),
    'min_free_disk_mb': Spec(500, 'No episode starts with less free disk under output; a '
                                  'running one is discarded below half of it, MiB', 0, 10**9,
                             dynamic=True),
}
HISTORY_S = 5.0  # how far back commanded setpoints can be looked up


class CommandHistory:
    """The commanded setpoint at any recent time, as the controller executed it then."""

    def __init__(self, joint_names):
        self.joint_names = tuple(joint_names)
        self._followers = deque()  # (valid from, follower as it was from then on)

    def hold(self, position, now):
        """Start from holding `position` (the first joint state: what a controller holds)."""
        follower = TrajectoryFollower(self.joint_names, position)
        follower.hold(position, now)
        self._followers.append((now, follower))

    @property
    def started(self):
        """Return whether a position is known to hold."""
        return bool(self._followers)

    def command(self, command, now):
        """Take a trajectory received at `now`; raise InvalidTrajectoryError."""
        follower = copy.copy(self._followers[-1][1])  # its arrays are replaced, not changed
        follower.set_trajectory(command, now)
        self._followers.append((now, follower))
        while len(self._followers) > 1 and self._followers[1][0] < now - HISTORY_S:
            self._followers.popleft()

    def at(self, stamp):
        """Return the commanded positions at `stamp`, or None before the history starts."""
        for since, follower in reversed(self._followers):
            if since <= stamp:
                return follower.sample(stamp)[0]
        return None


class RecorderNode(Node):
    """Records synchronized observations and their actions into a LeRobotDataset."""

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        specs = {name: SPECS[name] for name in INPUT_PARAMETERS} | RECORDER_SPECS
        for name, spec in specs.items():
            self.declare_parameter(name, spec.default, descriptor(name, spec))
        values = {name: spec.default for name, spec in SPECS.items()}
        values.update({name: self.get_parameter(name).value for name in INPUT_PARAMETERS})
        self._settings = settings_from_values(values)
        own = {name: self.get_parameter(name).value for name in RECORDER_SPECS}
        if own['action_source'] not in ACTION_SOURCES:
            raise ParameterError('action_source', own['action_source'],
                                 f"must be one of {', '.join(ACTION_SOURCES)}")
        self._action_source = own['action_source']
        self._lock = threading.Lock()
        self._last_now = 0.0
        self._rejected = 0
        self.recorder = DatasetRecorder(
            own['output'], own['repo_id'], own['fps'], self._settings.camera_names,
            self._settings.joint_names, use_videos=own['use_videos'],
            robot_type=own['robot_type'], max_stall_s=self._settings.observation_timeout,
            min_free_bytes=own['min_free_disk_mb'] * 2**20)
        self._frame_times = {}  # camera index -> ROS time of its newest valid frame
        self._inputs = NodeInputs(self, self._lock, now=self._now, on_frame=self.frame_callback,
                                  on_observation=self.observation_callback,
                                  on_epoch=lambda epoch: None, on_estop=lambda: None)
        self._entities = []
        self._inputs.configure(self._settings, self._settings.max_velocity, self._entities)
        self._commands = CommandHistory(self._settings.joint_names)
        # The leader's joint states are read as the follower's: interpolated at the frame's
        # stamp, held up to joint_state_max_extrapolation past the newest one.
        self._leader = JointStateBuffer(
            capacity=400, max_gap=self._settings.joint_state_max_gap,
            max_extrapolation=self._settings.joint_state_max_extrapolation)
        self._leader_mapper = JointStateMapper(self._settings.joint_names)
        group = MutuallyExclusiveCallbackGroup()
        if self._action_source == 'commanded':
            self.create_subscription(
                JointTrajectory, own['trajectory_topic'], self.trajectory_callback,
                QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE),
                callback_group=group)
        else:
            self.create_subscription(JointState, own['leader_topic'], self.leader_callback,
                                     sensor_qos(self._settings.joint_state_reliability),
                                     callback_group=group)
        self.create_service(StartEpisode, '~/start_episode', self.start_episode_callback)
        self.create_service(SetBool, '~/stop_episode', self.stop_episode_callback)
        self.create_timer(0.1, self.check_timer_callback)
        self.add_on_set_parameters_callback(self._parameters_callback)
        self.get_logger().info(
            f"recording into {own['output']} at {own['fps']} fps, cameras "
            f'{list(self._settings.camera_topics)}, actions: {self._action_source}, '
            f'{self.recorder.saved_episodes} episodes there already')

    def _now(self):
        return self.get_clock().now().nanoseconds * 1e-9

    def _parameters_callback(self, parameters):
        from rcl_interfaces.msg import SetParametersResult
        for parameter in parameters:
            if parameter.name == 'min_free_disk_mb':
                self.recorder.min_free_bytes = int(parameter.value) * 2**20
        return SetParametersResult(successful=True)

    # Inputs ---------------------------------------------------------------------------------
    def frame_callback(self, index, rgb, frame_key):
        """Note when each camera last sent a valid frame (to name one that stops)."""
        self._frame_times[index] = self._now()

    def observation_callback(self, observation):
        """Sample the observation's action and offer both to the dataset recorder."""
        if self._action_source == 'commanded':
            with self._lock:
                if not self._commands.started:
                    self._commands.hold(observation.state, observation.stamp)
                action = self._commands.at(observation.stamp)
        else:
            action = self._leader.at(observation.stamp)
        if action is None:
            self.get_logger().warning(
                f'no {self._action_source} action at stamp {observation.stamp:.3f}: frame '
                'not recorded', throttle_duration_sec=LOG_THROTTLE_S)
            return
        self.recorder.offer(observation.stamp_ns, observation.frames, observation.state,
                            action, self.get_clock().now().nanoseconds)

    def trajectory_callback(self, msg):
        """Keep a commanded trajectory (validated as joint_trajectory_controller would)."""
        try:
            command = trajectory_command(msg)
            with self._lock:
                if not self._commands.started:
                    latest = self._inputs.joint_buffer.latest()
                    if latest is None:
                        raise InvalidTrajectoryError('no joint state yet to start it from')
                    self._commands.hold(latest[1], self._now())
                self._commands.command(command, self._now())
        except InvalidTrajectoryError as error:
            self._rejected += 1
            self.get_logger().warning(f'trajectory not taken ({self._rejected} so far): {error}',
                                      throttle_duration_sec=LOG_THROTTLE_S)

    def leader_callback(self, msg):
        """Buffer the leader arm's joint state, mapped by name into the joint order."""
        try:
            sample = self._leader_mapper.convert(msg)
        except InputRejected as error:
            self.get_logger().warning(f'leader joint state rejected: {error}',
                                      throttle_duration_sec=LOG_THROTTLE_S)
            return
        with self._lock:
            self._leader.add(sample.stamp, sample.positions, sample.velocities)

    def check_timer_callback(self):
        """Discard an episode whose inputs stopped, whose disk fills or whose clock went back."""
        now = self._now()
        if now < self._last_now - 1e-3:
            with self._lock:
                self._inputs.new_time_base()
                self._leader.clear()
            self.recorder.discard(f'the ROS clock jumped back by {self._last_now - now:.3f} s')
        self._last_now = now
        self.recorder.check(self.get_clock().now().nanoseconds, self._stalled_inputs(now))

    def _stalled_inputs(self, now):
        """Return the inputs that sent nothing for longer than observation_timeout."""
        limit = self._settings.observation_timeout
        stalled = [name for index, name in enumerate(self._settings.camera_names)
                   if now - self._frame_times.get(index, -float('inf')) > limit]
        with self._lock:
            joints = self._inputs.last_joint_state_time
        if joints is None or now - joints > limit:
            stalled.append('joint_states')
        return stalled

    # Services -------------------------------------------------------------------------------
    def start_episode_callback(self, request, response):
        """Start an episode with the given task (empty: the latched instruction)."""
        silent = self._stalled_inputs(self._now())
        if silent:
            response.success = False
            response.message = f'inputs silent: {", ".join(silent)} (nothing to record)'
            self.get_logger().error(f'episode not started: {response.message}',
                                    throttle_duration_sec=LOG_THROTTLE_S)
            return response
        with self._lock:
            task = request.task.strip() or (self._inputs.instruction or '')
            if task and self._inputs.instruction is None:
                self._inputs.instruction = task  # observations need one to be made
        try:
            response.episode_index = self.recorder.start_episode(
                task, self.get_clock().now().nanoseconds)
            response.success = True
            response.message = f'recording episode {response.episode_index}: {task!r}'
            self.get_logger().info(response.message)
        except RecordingError as error:
            response.success = False
            response.message = str(error)
            self.get_logger().error(f'episode not started: {error}')
        return response

    def stop_episode_callback(self, request, response):
        """End the episode: data true saves it, false discards it."""
        try:
            report = self.recorder.stop_episode(save=request.data)
        except RecordingError as error:
            response.success = False
            response.message = str(error)
            return response
        response.success = report.saved
        response.message = (
            f'episode {report.index}: {report.frames} frames ({report.repeated} repeated) '
            + ('saved' if report.saved else f'not saved: {report.reason}'))
        if report.saved:
            self.get_logger().info(response.message)
        else:
            self.get_logger().warning(response.message)
        return response

    def destroy_node(self):
        """Discard an episode under way, finalize the dataset, destroy the node."""
        self.recorder.close()
        return super().destroy_node()


def main(args=None):
    """Run the recorder until Ctrl-C; the dataset is finalized on the way out."""
    rclpy.init(args=args)
    node = None
    try:
        node = RecorderNode()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        spin_until_shutdown(executor)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except (ParameterError, RecordingError) as error:
        print(f'[{NODE_NAME}] fatal: {error}')
        return 1
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
