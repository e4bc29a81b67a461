# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The main job (`make demo`): the simulated SO-101 arm driven by the control node, then a report.

Starts the MuJoCo simulator and the control node as processes on a private ROS domain (the same
executables `ros2 launch pi0_ros sim.launch.py` starts), sends an instruction, shows a live status
line, and after `--duration` seconds stops both and writes a report folder: summary.json,
joints.png (commanded vs measured), latency.png, control_period.png and cameras.png.
"""
import argparse
import json
import os
from pathlib import Path
import signal
import sys
import time

import numpy as np

from pi0_ros.launch_arguments import sim_camera_settings
from pi0_ros.tools.domain import claim_domain_id
from pi0_ros.tools.processes import (copy_to_environ, fastdds_profile_env, FASTDDS_PROFILE_HELP,
                                     FASTDDS_PROFILE_VARIABLE, node_parameter, Process, ros_args)

RANDOM_WEIGHTS_NOTE = (
    'Random weights: the built-in tiny model moves the arm without purpose. Point the demo at a '
    'LeRobot pi0 checkpoint directory with CHECKPOINT=/path/to/checkpoint (and DEVICE=cuda).')


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--duration', type=float, default=30.0, help='seconds of control')
    parser.add_argument('--checkpoint', default='', help='LeRobot pi0 checkpoint directory')
    parser.add_argument('--device', default='auto', help='auto | cpu | cuda | cuda:N')
    parser.add_argument('--precision', default='auto', help='auto | fp32 | bf16 | fp16')
    parser.add_argument('--instruction', default='pick up the red cube and place it in the bowl')
    # Camera defaults by device, as sim.launch.py chooses them (launch_arguments.py).
    parser.add_argument('--image-width', type=int, default=None,
                        help='default: 320 on the CPU, 640 on a GPU')
    parser.add_argument('--image-height', type=int, default=None,
                        help='default: 240 on the CPU, 480 on a GPU')
    parser.add_argument('--camera-rate', type=float, default=None,
                        help='default: 10 on the CPU, 15 on a GPU')
    parser.add_argument('--control-rate', type=float, default=50.0)
    parser.add_argument('--startup-timeout', type=float, default=300.0,
                        help='seconds to wait for the node to follow the policy')
    parser.add_argument('--output', default='reports/demo', help='report folder')
    parser.add_argument('--domain-id', type=int, default=None,
                        help='ROS_DOMAIN_ID (default: one no other run on this machine holds)')
    parser.add_argument('--fastdds-profile', default=None, metavar='PATH|none',
                        help=FASTDDS_PROFILE_HELP)
    parser.add_argument('--node-parameter', type=node_parameter, action='append', default=[],
                        metavar='NAME:=VALUE',
                        help='a control node parameter (repeatable; VALUE a Python literal, else '
                             'a string), e.g. inference_niceness:=10')
    return parser.parse_args(argv)


class Recorder:
    """Subscribes to what the demo reports on and keeps it with receive times."""

    def __init__(self, node, joint_names):
        from pi0_ros.msg import ActionChunk, PolicyStatus
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image, JointState
        from trajectory_msgs.msg import JointTrajectory
        self.joint_names = list(joint_names)
        self.command_points = []  # (receive time, all positions [P, J], velocities [P, J])
        self.command_times = []
        self.measured = []      # (receive time, positions)
        self.latencies_ms = []  # (receive time, the chunk's inference time in ms)
        self.chunks = []  # (receive time, receive time on the ROS clock, Chunk in joint order)
        self.statuses = []
        self.status_times = []  # receive time of each status
        self.frames = {}
        self.non_finite_commands = 0
        self.invalid_commands = 0  # not a JointTrajectory for these joints (ragged, names)
        node.create_subscription(JointTrajectory, 'arm_controller/joint_trajectory',
                                 self.trajectory_callback, 10)
        node.create_subscription(JointState, 'joint_states', self.joint_state_callback,
                                 qos_profile_sensor_data)
        self.observation_to_command_ms = []  # (receive time, ms)
        self._clock = node.get_clock()
        node.create_subscription(ActionChunk, 'pi0_ros/action_chunk', self.chunk_callback, 10)
        node.create_subscription(PolicyStatus, 'pi0_ros/status', self.status_callback, 10)
        for camera in ('front', 'side', 'wrist'):
            node.create_subscription(Image, f'camera/{camera}/image_raw',
                                     lambda msg, c=camera: self.frames.__setitem__(c, msg),
                                     qos_profile_sensor_data)

    def status_callback(self, msg):
        self.status_times.append(time.monotonic())
        self.statuses.append(msg)

    def chunk_callback(self, msg):
        # The node publishes a chunk on the control tick that first commands from it: receive
        # time - observation stamp is the observation-to-first-command latency (+ delivery).
        received = time.monotonic()
        self.latencies_ms.append((received, msg.total_ms))
        stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        now_ns = self._clock.now().nanoseconds
        self.observation_to_command_ms.append((received, (now_ns - stamp_ns) * 1e-6))
        from pi0_ros.control import Chunk
        try:
            index = [list(msg.joint_names).index(n) for n in self.joint_names]
            actions = np.asarray(msg.actions, dtype=np.float64).reshape(msg.horizon, -1)[:, index]
            self.chunks.append((received, now_ns * 1e-9, Chunk(stamp_ns * 1e-9, msg.dt, actions)))
        except ValueError:  # joints missing or a ragged chunk: no seam measured for it
            pass

    def trajectory_callback(self, msg):
        now = time.monotonic()
        self.command_times.append(now)
        if not msg.points:
            return
        try:
            index = [list(msg.joint_names).index(n) for n in self.joint_names]
            positions = np.array([p.positions for p in msg.points], dtype=np.float64)[:, index]
            velocities = np.array([p.velocities if len(p.velocities)
                                   else [0.0] * len(msg.joint_names) for p in msg.points],
                                  dtype=np.float64)[:, index]
        except (ValueError, IndexError):  # a joint missing, ragged or short points
            self.invalid_commands += 1
            return
        if not (np.all(np.isfinite(positions)) and np.all(np.isfinite(velocities))):
            self.non_finite_commands += 1
        self.command_points.append((now, positions, velocities))

    @property
    def commands(self):
        """Return (receive time, first point positions) of every command."""
        return [(t, positions[0]) for t, positions, _ in self.command_points]

    def joint_state_callback(self, msg):
        if all(n in msg.name for n in self.joint_names):
            index = [list(msg.name).index(n) for n in self.joint_names]
            self.measured.append((time.monotonic(), np.array(msg.position)[index]))


class ProgressPrinter:
    """
    Print status lines at most every `interval` seconds.

    On a terminal each line overwrites the last (carriage return, every 0.5 s); in a log file
    or pipe each is its own line, every 5 s.
    """

    def __init__(self, stream=sys.stdout):
        self.stream = stream
        self.terminal = stream.isatty()
        self.interval = 0.5 if self.terminal else 5.0
        self.next_time = None
        self.printed = False

    def show(self, line: str, now: float) -> None:
        """Print line unless the last one was printed less than `interval` ago."""
        if self.next_time is not None and now < self.next_time:
            return
        self.next_time = now + self.interval
        self.printed = True
        print(f'\r{line}' if self.terminal else line, end='' if self.terminal else '\n',
              file=self.stream, flush=True)

    def finish(self) -> None:
        """End the overwritten line on a terminal; the next show() prints at once."""
        if self.terminal and self.printed:
            print(file=self.stream, flush=True)
        self.next_time = None
        self.printed = False


def status_line(elapsed, duration, recorder):
    status = recorder.statuses[-1] if recorder.statuses else None
    if status is None:
        return f'[{elapsed:5.1f}/{duration:.0f} s] waiting for the control node...'
    states = {0: 'disabled', 1: 'following', 2: 'holding', 3: 'E-STOP'}
    state = states.get(status.output_state, '?')
    if status.hold_reason and status.output_state != 1:
        state += f' ({status.hold_reason})'
    return (f'[{elapsed:5.1f}/{duration:.0f} s] output {status.control_rate_hz:5.1f} Hz | '
            f'inference p50 {status.inference_latency_p50_ms:6.1f} ms | observation age '
            f'{status.observation_age_s * 1e3:6.0f} ms | chunks {status.chunks_produced:4d} | '
            f'{state:<28}')


def seam_summary(recorder, limits, control_rate, node_parameters, window):
    """
    Measure the chunk hand-overs of the window (pi0_ros.control.seams).

    The chunks are replayed through a planner configured as the node was (blending or temporal
    ensembling), taking them at their receive times on the ROS clock.
    """
    from pi0_ros.control import JointLimits, PlannerConfig
    from pi0_ros.control.seams import evaluate_seams
    from pi0_ros.parameters import SPECS

    def setting(name):
        return node_parameters.get(name, SPECS[name].default)

    period = 1.0 / control_rate
    config = PlannerConfig(control_period=period, point_spacing=period,
                           points_per_message=setting('points_per_message'),
                           blend_duration=setting('blend_duration'),
                           temporal_ensembling=setting('temporal_ensembling'),
                           ensembling_decay=setting('ensembling_decay'))
    start, end = window
    arrivals = [(ros_time, chunk) for received, ros_time, chunk in recorder.chunks
                if start <= received <= end]
    planner_limits = JointLimits(*(np.asarray(getattr(limits, name), dtype=np.float64)
                                   for name in ('position_lower', 'position_upper',
                                                'max_velocity', 'max_acceleration')),
                                 names=limits.names)
    seams = evaluate_seams(arrivals, config, planner_limits)

    def stats(key):
        values = np.array([s[key] for s in seams if s[key] is not None])
        if not values.size:
            return None
        return {'mean': float(values.mean()), 'p50': float(np.percentile(values, 50)),
                'p90': float(np.percentile(values, 90)), 'max': float(values.max())}
    # The disagreement by action after the switch (median over the seams that reach it): where
    # a hand-over agrees with the plan and where it stops to.
    steps = max((len(s['position_gaps']) for s in seams), default=0)
    by_step = [float(np.median([s['position_gaps'][k] for s in seams
                                if len(s['position_gaps']) > k])) for k in range(steps)]
    seams = [{key: value for key, value in s.items() if key != 'position_gaps'} for s in seams]
    return {'count': len(seams), 'position_gap_by_action_p50': by_step,
            'overlap_steps_mean': float(np.mean([s['overlap_steps'] for s in seams]))
            if seams else None,
            'position_rms': stats('position_rms'), 'velocity_rms': stats('velocity_rms'),
            'reference_acceleration_ratio': stats('reference_acceleration'),
            'chunk_acceleration_ratio': stats('chunk_acceleration'),
            'handover_acceleration_ratio': stats('handover_acceleration'),
            'handover_over_acceleration_limit': int(sum(s['handover_acceleration'] > 1.0
                                                        for s in seams)),
            'over_acceleration_limit': int(sum(s['reference_acceleration'] > 1.0 for s in seams)),
            'seams': seams}


def summarize(recorder, limits, control_rate, window):
    """Compute the report's numbers over the measured window (monotonic start, end)."""
    from pi0_ros.msg import PolicyStatus
    start, end = window
    command_times = np.array([t for t in recorder.command_times if start <= t <= end])
    periods = np.diff(command_times) if command_times.size > 1 else np.empty(0)
    rate = (command_times.size - 1) / (command_times[-1] - command_times[0]) \
        if command_times.size > 1 else 0.0
    commands = [(t, q) for t, q in recorder.commands if start <= t <= end]
    measured = [(t, q) for t, q in recorder.measured if start <= t <= end]
    lower, upper = np.asarray(limits.position_lower), np.asarray(limits.position_upper)
    max_velocity = np.asarray(limits.max_velocity)
    # Every point of every command of the whole run (start-up too: the first chunk's hand-over
    # and the holds before it): positions inside the limits, speeds within them.
    out_of_limits = sum(int(np.any(q < lower - 1e-9) or np.any(q > upper + 1e-9)
                            or np.any(np.abs(v) > max_velocity * (1 + 1e-6)))
                        for t, q, v in recorder.command_points)
    tracking = []
    if commands and measured:
        measured_times = np.array([t for t, _ in measured])
        measured_positions = np.stack([q for _, q in measured])
        for t, q in commands:
            i = min(np.searchsorted(measured_times, t), len(measured_times) - 1)
            tracking.append(np.abs(measured_positions[i] - q))
    tracking = np.array(tracking)
    latencies = np.array([ms for t, ms in recorder.latencies_ms if start <= t <= end])
    to_command = np.array([ms for t, ms in recorder.observation_to_command_ms
                           if start <= t <= end])
    last = recorder.statuses[-1] if recorder.statuses else None
    states = [status.output_state for t, status in zip(recorder.status_times, recorder.statuses)
              if start <= t <= end]
    motion = 0.0
    if measured:
        positions = np.stack([q for _, q in measured])
        motion = float(np.max(positions.max(axis=0) - positions.min(axis=0)))
    return {
        'commands': int(command_times.size),
        'output_rate_hz': rate,
        'output_rate_error': (rate - control_rate) / control_rate if rate else -1.0,
        'control_period_ms': {
            'p50': float(np.percentile(periods, 50) * 1e3) if periods.size else None,
            'p99': float(np.percentile(periods, 99) * 1e3) if periods.size else None,
            'jitter_p99': float(np.percentile(np.abs(periods - periods.mean()), 99) * 1e3)
            if periods.size else None},
        'inference_latency_ms': {
            'count': int(latencies.size),
            'p50': float(np.percentile(latencies, 50)) if latencies.size else None,
            'p99': float(np.percentile(latencies, 99)) if latencies.size else None},
        'observation_to_first_command_ms': {
            'p50': float(np.percentile(to_command, 50)) if to_command.size else None,
            'p99': float(np.percentile(to_command, 99)) if to_command.size else None},
        'tracking_error_rad': {
            'mean': float(tracking.mean()) if tracking.size else None,
            'max': float(tracking.max()) if tracking.size else None},
        'measured_motion_range_rad': motion,
        # the share of the node's statuses in the window that report following the policy
        'following_fraction': (sum(state == PolicyStatus.OUTPUT_FOLLOWING for state in states)
                               / len(states)) if states else None,
        'commands_out_of_limits': out_of_limits,
        'non_finite_commands': recorder.non_finite_commands,
        'invalid_commands': recorder.invalid_commands,
        'node_output_rate_hz': None if last is None else last.control_rate_hz,
        'final_status': None if last is None else {
            'chunks_produced': last.chunks_produced, 'actions_skipped': last.actions_skipped,
            'observations_synced': last.observations_synced,
            'observations_dropped': last.observations_dropped,
            'inputs_rejected': last.inputs_rejected, 'engine_detail': last.engine_detail,
            # frames the inference thread encoded as they arrived, then used by a chunk
            'vision_cache_hits': last.vision_cache_hits},
    }


def write_plots(output, recorder, joint_names, window):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    start = window[0]
    figure, axes = plt.subplots(len(joint_names), 1, figsize=(10, 2 * len(joint_names)),
                                sharex=True)
    commands = recorder.commands
    for j, (axis, name) in enumerate(zip(axes, joint_names)):
        if commands:
            axis.plot([t - start for t, _ in commands],
                      [q[j] for _, q in commands], label='commanded', lw=1.2)
        if recorder.measured:
            axis.plot([t - start for t, _ in recorder.measured],
                      [q[j] for _, q in recorder.measured], label='measured', lw=0.8)
        axis.set_ylabel(f'{name}\n[rad]')
    axes[0].legend(loc='upper right')
    axes[-1].set_xlabel('time [s]')
    figure.suptitle('Commanded (first trajectory point) vs measured joint positions')
    figure.tight_layout()
    figure.savefig(output / 'joints.png', dpi=90)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(7, 4))
    axis.hist([ms for t, ms in recorder.latencies_ms if t >= start], bins=40)
    axis.set_xlabel('inference latency per chunk [ms]')
    axis.set_ylabel('chunks')
    axis.set_title('Engine latency (ActionChunk.total_ms)')
    figure.tight_layout()
    figure.savefig(output / 'latency.png', dpi=90)
    plt.close(figure)

    times = np.array([t for t in recorder.command_times if t >= start])
    figure, axis = plt.subplots(figsize=(7, 4))
    if times.size > 1:
        axis.hist(np.diff(times) * 1e3, bins=60)
    axis.set_xlabel('period between received commands [ms]')
    axis.set_ylabel('count')
    axis.set_title('Control period (as received over DDS)')
    figure.tight_layout()
    figure.savefig(output / 'control_period.png', dpi=90)
    plt.close(figure)

    from pi0_ros.conversions import image_to_rgb
    frames = [image_to_rgb(recorder.frames[c], 4096, 4096)
              for c in ('front', 'side', 'wrist') if c in recorder.frames]
    if frames:
        figure, axes = plt.subplots(1, len(frames), figsize=(4 * len(frames), 3.3))
        for axis, frame, name in zip(np.atleast_1d(axes), frames, ('front', 'side', 'wrist')):
            axis.imshow(frame)
            axis.set_title(name)
            axis.axis('off')
        figure.tight_layout()
        figure.savefig(output / 'cameras.png', dpi=90)
        plt.close(figure)


def camera_settings(args):
    """Return the simulator's image_width, image_height, camera_rate: given, else by device."""
    given = {name: getattr(args, name) for name in ('image_width', 'image_height', 'camera_rate')}
    return sim_camera_settings(args.device, {name: '' if value is None else value
                                             for name, value in given.items()})


def main(argv=None):
    """Run the demo; return 0 when everything worked, 1 otherwise."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    output = Path(args.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    domain_id = args.domain_id if args.domain_id is not None else claim_domain_id()
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain_id), PYTHONUNBUFFERED='1')
    env.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    env.setdefault('MUJOCO_GL', 'egl')
    try:
        profile = fastdds_profile_env(env, args.fastdds_profile) or 'none'
    except FileNotFoundError as error:
        print(f'pi0_ros demo: {error}', file=sys.stderr)
        return 1
    # This process joins the same domain with the same transports.
    copy_to_environ(env, ('ROS_DOMAIN_ID', 'ROS_AUTOMATIC_DISCOVERY_RANGE',
                          FASTDDS_PROFILE_VARIABLE))

    import rclpy
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    from pi0_ros.sim.scene import joint_limits

    limits = joint_limits()
    cameras = camera_settings(args)
    print(f'pi0_ros demo: simulated SO-101 + control node for {args.duration:.0f} s '
          f'(ROS_DOMAIN_ID={domain_id}, Fast DDS profile {profile}, cameras '
          f"{cameras['image_width']}x{cameras['image_height']} at {cameras['camera_rate']:g} Hz);"
          f' report in {output}')
    if not args.checkpoint:
        print(RANDOM_WEIGHTS_NOTE)
    sim = Process('sim', [sys.executable, '-m', 'pi0_ros.sim.node'] + ros_args(cameras),
                  env, output)
    control = Process('control', [sys.executable, '-m', 'pi0_ros.node'] + ros_args(
        {'checkpoint': args.checkpoint, 'device': args.device, 'precision': args.precision,
         'control_rate': args.control_rate, 'max_image_width': max(cameras['image_width'], 64),
         'max_image_height': max(cameras['image_height'], 64), **dict(args.node_parameter)},
        remaps=[('joint_trajectory', 'arm_controller/joint_trajectory')]), env, output)
    processes = [sim, control]

    rclpy.init(args=[])  # not sys.argv: a NAME:=VALUE option would read as a ROS remap
    node = rclpy.create_node('pi0_demo')
    recorder = Recorder(node, limits.names)
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_publisher(String, 'instruction', latched).publish(String(data=args.instruction))
    failures = []
    window = (time.monotonic(), time.monotonic())
    begin = None
    progress = ProgressPrinter()
    try:
        started = time.monotonic()
        while time.monotonic() - started < args.startup_timeout:
            rclpy.spin_once(node, timeout_sec=0.1)
            if recorder.statuses and recorder.statuses[-1].output_state == 1:
                break
            if not all(p.alive() for p in processes):
                break
            progress.show(status_line(0.0, args.duration, recorder), time.monotonic())
        else:
            failures.append(f'the control node did not follow the policy within '
                            f'{args.startup_timeout:.0f} s')
        progress.finish()
        print(f'ready after {time.monotonic() - started:.1f} s of start-up')
        begin = time.monotonic()
        while not failures and time.monotonic() - begin < args.duration:
            rclpy.spin_once(node, timeout_sec=0.05)
            now = time.monotonic()
            progress.show(status_line(now - begin, args.duration, recorder), now)
            dead = [p.name for p in processes if not p.alive()]
            if dead:
                failures.append(f'process exited early: {", ".join(dead)}')
        window = (begin, time.monotonic())
        progress.finish()
    except KeyboardInterrupt:
        failures.append('interrupted')
        if begin is not None:
            window = (begin, time.monotonic())  # the report covers what was recorded
    finally:
        exit_codes = {p.name: p.stop() for p in reversed(processes)}
        node.destroy_node()
        rclpy.try_shutdown()

    summary = summarize(recorder, limits, args.control_rate, window)
    summary['seams'] = seam_summary(recorder, limits, args.control_rate,
                                    dict(args.node_parameter), window)
    summary.update({'duration_s': window[1] - window[0], 'checkpoint': args.checkpoint or None,
                    'device': args.device, 'instruction': args.instruction,
                    'cameras': cameras, 'node_parameters': dict(args.node_parameter),
                    'exit_codes': exit_codes, 'note': RANDOM_WEIGHTS_NOTE
                    if not args.checkpoint else ''})
    for name, code in exit_codes.items():
        if code not in (0, -signal.SIGINT):
            failures.append(f'{name} exited with {code}')
    node_rate = summary['node_output_rate_hz'] or 0.0
    if summary['commands'] == 0:
        failures.append('no trajectory commands were received')
    elif abs(node_rate - args.control_rate) / args.control_rate > 0.05:
        failures.append(f'output rate {node_rate:.1f} Hz (measured by the node) is off target')
    if (summary['commands_out_of_limits'] or summary['non_finite_commands']
            or summary['invalid_commands']):
        failures.append('unsafe commands were published')
    summary['failures'] = failures
    (output / 'summary.json').write_text(json.dumps(summary, indent=2))
    write_plots(output, recorder, limits.names, window)
    latency = summary['inference_latency_ms']
    tracking = summary['tracking_error_rad']
    print(f'output {node_rate:.2f} Hz at the node, '
          f"{summary['output_rate_hz']:.2f} Hz received (target {args.control_rate:.0f}), "
          f"period jitter p99 {summary['control_period_ms']['jitter_p99'] or 0:.2f} ms; "
          f"inference p50 {latency['p50'] or 0:.1f} ms over {latency['count']} chunks; "
          f"following {100 * (summary['following_fraction'] or 0):.1f} % of the time; "
          f"tracking error mean {tracking['mean'] or 0:.3f} rad")
    print(f'report: {output}/summary.json, joints.png, latency.png, control_period.png, '
          'cameras.png')
    if failures:
        for failure in failures:
            print(f'FAILED: {failure}', file=sys.stderr)
        for process in processes:
            print(f'--- last lines of {process.name}.log ---\n{process.tail()}', file=sys.stderr)
        return 1
    if not args.checkpoint:
        print(RANDOM_WEIGHTS_NOTE)
    return 0


if __name__ == '__main__':
    sys.exit(main())
