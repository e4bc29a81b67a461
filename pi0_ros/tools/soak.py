# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Soak run: the control node under a steady robot-like feed for a long time, then a report.

`python -m pi0_ros.tools.soak --duration 1800 --output reports/soak` starts the control node as a
process (the built-in tiny model on the CPU; `--device cuda --checkpoint DIR` for a real policy,
`--device cuda --random-model full` for random weights of Pi0's full size), and a feeder process
that publishes three cameras (640x480 rgb8, 30 Hz), joint states (500 Hz, tracking the commands
like a stiff position controller) and an instruction that changes every few seconds.
This process only watches: command receive times and validity, ~/status, /diagnostics, the node's
RSS (psutil) and GPU memory. It writes summary.json (numbers and pass/fail criteria),
timeseries.png (RSS, output rate, jitter, latency, counters) and control_period.png, and exits
with code 1 when a criterion fails.

The feeder runs in its own process so that publishing 80 MB/s of images and 500 joint states per
second does not disturb the receive-time measurement of the commands here. Every process gets the
package's Fast DDS profile config/fastdds_large_images.xml (unless FASTRTPS_DEFAULT_PROFILES_FILE
names one already, or --fastdds-profile says otherwise): with Fast DDS's default transports most
camera frames never reach the node on the same host.
"""
import argparse
import json
import math
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from pi0_ros.parameters import (SO101_JOINTS, SO101_MAX_VELOCITY, SO101_POSITION_LOWER,
                                SO101_POSITION_UPPER)
from pi0_ros.tools.domain import claim_domain_id
from pi0_ros.tools.processes import (copy_to_environ, fastdds_profile_env, FASTDDS_PROFILE_HELP,
                                     FASTDDS_PROFILE_VARIABLE, node_parameter, Process, ros_args)

CAMERAS = ('front', 'side', 'wrist')
INSTRUCTIONS = ('pick up the red cube', 'put the cube in the bowl', 'open the gripper',
                'move the arm to the left', 'push the block forward', 'wave hello')
RANDOM_WEIGHTS_NOTE = 'Random {} model (no checkpoint): the arm moves without purpose.'
COUNTER_FIELDS = ('chunks_produced', 'chunks_discarded', 'observations_synced',
                  'observations_dropped', 'actions_skipped', 'inputs_rejected')
OUTPUT_FOLLOWING = 1
# Two feeder processes: 2.7 MB camera sets block a Python thread for milliseconds, which would make
# a 500 Hz joint-state stream in the same process late; each keeps its own schedule.
FEEDER_STREAMS = {'cameras': ('camera', 'instruction'), 'joints': ('joint',)}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--duration', type=float, default=1800.0,
                        help='seconds of soak after the node first follows the policy')
    parser.add_argument('--warmup', type=float, default=None,
                        help='seconds excluded from the growth/rate criteria (default: '
                             'min(120, duration / 5))')
    parser.add_argument('--output', default='reports/soak', help='report folder')
    parser.add_argument('--checkpoint', default='', help='LeRobot pi0 checkpoint directory')
    parser.add_argument('--random-model', choices=('tiny', 'full'), default='tiny',
                        help="size of the node's random-weight model without a checkpoint (full: "
                             "Pi0's full size, for a GPU)")
    parser.add_argument('--device', default='cpu', help='auto | cpu | cuda | cuda:N')
    parser.add_argument('--precision', default='auto', help='auto | fp32 | bf16 | fp16')
    parser.add_argument('--node-parameter', type=node_parameter, action='append', default=[],
                        metavar='NAME:=VALUE',
                        help='another control-node parameter (repeatable; VALUE is a Python '
                             'literal, else a string), e.g. control_thread_priority:=0')
    parser.add_argument('--control-rate', type=float, default=50.0)
    parser.add_argument('--camera-rate', type=float, default=30.0)
    parser.add_argument('--joint-rate', type=float, default=500.0)
    parser.add_argument('--image-width', type=int, default=640)
    parser.add_argument('--image-height', type=int, default=480)
    parser.add_argument('--instruction-period', type=float, default=5.0,
                        help='seconds between instruction changes')
    parser.add_argument('--startup-timeout', type=float, default=300.0)
    parser.add_argument('--domain-id', type=int, default=None,
                        help='ROS_DOMAIN_ID (default: one no other run on this machine holds)')
    parser.add_argument('--fastdds-profile', default=None, metavar='PATH|none',
                        help=FASTDDS_PROFILE_HELP)
    parser.add_argument('--max-rss-growth', type=float, default=0.05,
                        help='allowed relative RSS growth after warm-up')
    parser.add_argument('--max-gpu-growth-mib', type=float, default=32.0,
                        help='allowed GPU memory growth after warm-up, MiB')
    parser.add_argument('--max-rate-error', type=float, default=0.02,
                        help='allowed relative error of the mean output rate')
    parser.add_argument('--max-jitter-ms', type=float, default=10.0,
                        help='allowed p99 |period - mean period| of received commands, ms')
    parser.add_argument('--min-following', type=float, default=0.95,
                        help='smallest fraction of statuses after warm-up that are following')
    parser.add_argument('--feeder', choices=FEEDER_STREAMS, default='', help=argparse.SUPPRESS)
    parser.add_argument('--feeder-stats', default='', help=argparse.SUPPRESS)
    # The robot namespace a feeder publishes in (pi0_ros.tools.fleet_bench: one per arm).
    parser.add_argument('--feeder-namespace', default='', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warmup is None:
        args.warmup = min(120.0, args.duration / 5.0)
    return args


# Feeder process ------------------------------------------------------------------------------
class Feeder:
    """Publishes precomputed camera frames, joint states and instructions on a fixed schedule."""

    def __init__(self, node, args, follow):
        from rclpy.qos import (DurabilityPolicy, qos_profile_sensor_data, QoSProfile,
                               ReliabilityPolicy)
        from builtin_interfaces.msg import Time
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String
        from trajectory_msgs.msg import JointTrajectory

        from pi0_ros.conversions import rgb_to_image
        self.node = node
        self.args = args
        self._string = String
        rng = np.random.default_rng(0)
        # One message per camera, built once; only the stamp changes per publish.
        self.images = {name: rgb_to_image(
            rng.integers(0, 255, (args.image_height, args.image_width, 3), dtype=np.uint8),
            Time(), name) for name in CAMERAS}
        self.joint_state = JointState(name=list(SO101_JOINTS), position=[0.0] * len(SO101_JOINTS))
        self.image_pubs = {name: node.create_publisher(type(self.images[name]),
                                                       f'camera/{name}/image_raw',
                                                       qos_profile_sensor_data)
                           for name in CAMERAS}
        self.joint_pub = node.create_publisher(JointState, 'joint_states', qos_profile_sensor_data)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.instruction_pub = node.create_publisher(String, 'instruction', latched)
        if follow:
            node.create_subscription(JointTrajectory, 'joint_trajectory', self.follow, 10)
        self._positions = [0.0] * len(SO101_JOINTS)
        self.stats = {'camera_sets': 0, 'joint_states': 0, 'instructions': 0,
                      'camera_late': 0, 'joint_late': 0}

    def follow(self, msg):
        """Track the first point of the latest command (a stiff position controller)."""
        if msg.points and list(msg.joint_names) == SO101_JOINTS:
            self._positions = [float(p) for p in msg.points[0].positions]

    def run(self, stop, streams):
        """Publish `streams` until `stop` is set; late ticks are skipped, not bunched."""
        clock = self.node.get_clock()
        periods = {'camera': 1.0 / self.args.camera_rate, 'joint': 1.0 / self.args.joint_rate,
                   'instruction': self.args.instruction_period}
        periods = {name: periods[name] for name in streams}
        publish = {'camera': self._publish_cameras, 'joint': self._publish_joint_state,
                   'instruction': self._publish_instruction}
        due = dict.fromkeys(periods, time.monotonic())
        while not stop.is_set():
            now = time.monotonic()
            for name, period in periods.items():
                if now >= due[name]:
                    publish[name](clock.now().to_msg())
                    due[name] += period
                    if due[name] < now:
                        if name != 'instruction':
                            self.stats[f'{name}_late'] += 1
                        due[name] = now + period
            time.sleep(max(0.0, min(due.values()) - time.monotonic()))

    def _publish_cameras(self, stamp):
        for name, msg in self.images.items():
            msg.header.stamp = stamp
            self.image_pubs[name].publish(msg)
        self.stats['camera_sets'] += 1

    def _publish_joint_state(self, stamp):
        self.joint_state.header.stamp = stamp
        self.joint_state.position = self._positions
        self.joint_pub.publish(self.joint_state)
        self.stats['joint_states'] += 1

    def _publish_instruction(self, stamp):
        text = INSTRUCTIONS[self.stats['instructions'] % len(INSTRUCTIONS)]
        self.instruction_pub.publish(self._string(data=text))
        self.stats['instructions'] += 1


def run_feeder(args):
    """Entry point of the feeder process; writes its counters to --feeder-stats on exit."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from pi0_ros.executors import freeze_loaded_objects
    rclpy.init(signal_handler_options=rclpy.signals.SignalHandlerOptions.NO)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    node = rclpy.create_node(f'pi0_soak_feeder_{args.feeder}',
                             namespace=args.feeder_namespace or None)
    feeder = Feeder(node, args, follow=args.feeder == 'joints')
    freeze_loaded_objects()  # no full passes of the collector pausing the streams
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, name='feeder_spin', daemon=True)
    spinner.start()
    started = time.monotonic()
    try:
        feeder.run(stop, FEEDER_STREAMS[args.feeder])
    finally:
        elapsed = time.monotonic() - started
        stats = dict(feeder.stats, elapsed_s=elapsed,
                     camera_rate_hz=feeder.stats['camera_sets'] / elapsed,
                     joint_rate_hz=feeder.stats['joint_states'] / elapsed)
        if args.feeder_stats:
            Path(args.feeder_stats).write_text(json.dumps(stats, indent=2))
        executor.shutdown(timeout_sec=2.0)
        spinner.join(timeout=2.0)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


# Monitor (this process) ----------------------------------------------------------------------
class Monitor:
    """Records what the node publishes, checks every command, samples RSS and GPU memory."""

    def __init__(self, node, node_pid, feeder_pids):
        import psutil
        from diagnostic_msgs.msg import DiagnosticArray
        from trajectory_msgs.msg import JointTrajectory

        from pi0_ros.msg import ActionChunk, PolicyStatus
        self.lower = np.array(SO101_POSITION_LOWER)
        self.upper = np.array(SO101_POSITION_UPPER)
        self.max_velocity = np.array(SO101_MAX_VELOCITY)
        self.command_times = []
        self.unsafe_commands = []     # (time, problem) of the first few
        self.unsafe_count = 0
        self.non_finite_count = 0
        self.out_of_limit_count = 0
        self.statuses = []            # (time, dict)
        self.diagnostics = []         # (time, dict of the output entry)
        self.chunks = []              # (time, total_ms, epoch)
        self.memory = []              # (time, node rss, feeder rss, node cpu %, gpu bytes)
        # Most publishers seen on the command and status topics: more than one means another
        # node shares the ROS domain and its messages are mixed into this record.
        self.max_publishers = 0
        self._node = node
        self._node_process = psutil.Process(node_pid)
        self._feeder_processes = [psutil.Process(pid) for pid in feeder_pids]
        self._node_process.cpu_percent()
        self._gpu_pid = node_pid
        self._nvidia_smi = shutil.which('nvidia-smi')
        self._nvml, self._nvml_handles = None, []
        if self._nvidia_smi is not None:
            try:
                import pynvml
                pynvml.nvmlInit()
                self._nvml_handles = [pynvml.nvmlDeviceGetHandleByIndex(index)
                                      for index in range(pynvml.nvmlDeviceGetCount())]
                self._nvml = pynvml
            except Exception:  # noqa: B902 - no NVML: nvidia-smi answers instead
                self._nvml = None
        node.create_subscription(JointTrajectory, 'joint_trajectory', self.trajectory_callback,
                                 10)
        node.create_subscription(PolicyStatus, 'pi0_ros/status', self.status_callback, 10)
        node.create_subscription(DiagnosticArray, '/diagnostics', self.diagnostics_callback, 10)
        node.create_subscription(ActionChunk, 'pi0_ros/action_chunk', self.chunk_callback, 10)

    def trajectory_callback(self, msg):
        from pi0_ros.control import validate_trajectory
        now = time.monotonic()
        self.command_times.append(now)
        times = [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points]
        positions = np.array([p.positions for p in msg.points], dtype=np.float64)
        velocities = np.array([p.velocities for p in msg.points], dtype=np.float64)
        problems = []
        if list(msg.joint_names) != SO101_JOINTS:
            problems.append(f'joint names {list(msg.joint_names)}')
        if positions.size and not (np.all(np.isfinite(positions))
                                   and np.all(np.isfinite(velocities))):
            self.non_finite_count += 1
            problems.append('non-finite values')
        elif positions.size and (np.any(positions < self.lower - 1e-9)
                                 or np.any(positions > self.upper + 1e-9)
                                 or np.any(np.abs(velocities) > self.max_velocity + 1e-6)):
            self.out_of_limit_count += 1
            problems.append('outside the position or velocity limits')
        problems += validate_trajectory(times, positions, velocities, len(SO101_JOINTS))
        if problems:
            self.unsafe_count += 1
            if len(self.unsafe_commands) < 20:
                self.unsafe_commands.append((now, '; '.join(problems)))

    def status_callback(self, msg):
        self.statuses.append((time.monotonic(), {
            'output_state': msg.output_state, 'hold_reason': msg.hold_reason,
            'engine_state': msg.engine_state, 'engine_detail': msg.engine_detail,
            'lifecycle_state': msg.lifecycle_state,
            'latency_p50_ms': msg.inference_latency_p50_ms,
            'latency_p99_ms': msg.inference_latency_p99_ms,
            'control_rate_hz': msg.control_rate_hz, 'control_rate_error': msg.control_rate_error,
            'gpu_memory_used_bytes': msg.gpu_memory_used_bytes,
            **{name: getattr(msg, name) for name in COUNTER_FIELDS}}))

    def diagnostics_callback(self, msg):
        from pi0_ros.diagnostics import GC_FULL_PASSES_KEY, GC_PAUSE_MAX_MS_KEY
        for status in msg.status:
            if status.name.endswith(': output'):
                values = {kv.key: kv.value for kv in status.values}
                self.diagnostics.append((time.monotonic(), {
                    'jitter_p99_ms': _float(values.get('period jitter p99 ms')),
                    'rate_hz': _float(values.get('rate hz')),
                    'commands_blocked': int(_float(values.get('commands blocked')) or 0),
                    'gc_full_passes': _float(values.get(GC_FULL_PASSES_KEY)),
                    'gc_pause_max_ms': _float(values.get(GC_PAUSE_MAX_MS_KEY))}))

    def chunk_callback(self, msg):
        self.chunks.append((time.monotonic(), msg.total_ms, msg.instruction_epoch))

    def start_sampling(self, period: float = 1.0) -> None:
        """
        Sample the node's memory and CPU every period seconds on a thread of their own.

        Not on the thread that receives the commands: a GPU query can take tens of ms, and the
        commands queued meanwhile would be stamped late (the first GPU soak's received jitter
        p99 of 21 ms was that, with 1.9 ms at the node).
        """
        self._stop_sampling = threading.Event()

        def loop():
            while not self._stop_sampling.wait(period):
                self.sample_memory()

        self._sampler = threading.Thread(target=loop, name='soak_sampler', daemon=True)
        self._sampler.start()

    def stop_sampling(self) -> None:
        """Stop the sampling thread (idempotent)."""
        if getattr(self, '_sampler', None) is not None:
            self._stop_sampling.set()
            self._sampler.join(timeout=10.0)
            self._sampler = None

    def sample_memory(self):
        """Record the node's RSS (and the feeder's), CPU use, and its GPU memory if any."""
        import psutil
        try:
            rss = self._node_process.memory_info().rss
            cpu = self._node_process.cpu_percent()
            feeder_rss = sum(p.memory_info().rss for p in self._feeder_processes)
        except psutil.Error:
            return
        self.memory.append((time.monotonic(), rss, feeder_rss, cpu, self._gpu_bytes()))

    def count_publishers(self):
        """Track the most publishers seen on the command and status topics."""
        self.max_publishers = max(self.max_publishers,
                                  self._node.count_publishers('joint_trajectory'),
                                  self._node.count_publishers('pi0_ros/status'))

    def _gpu_bytes(self):
        """GPU memory the node process holds (NVML, else nvidia-smi), 0 without a GPU."""
        if self._nvml is not None:
            try:
                return sum(process.usedGpuMemory or 0 for handle in self._nvml_handles
                           for process in self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                           if process.pid == self._gpu_pid)
            except Exception:  # noqa: B902 - a transient NVML error: fall back to nvidia-smi
                pass
        if self._nvidia_smi is None:
            return 0
        try:
            output = subprocess.run(
                [self._nvidia_smi, '--query-compute-apps=pid,used_memory',
                 '--format=csv,noheader,nounits'], capture_output=True, text=True, timeout=5.0,
                check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return 0
        total = 0
        for line in output.splitlines():
            fields = [f.strip() for f in line.split(',')]
            if len(fields) == 2 and fields[0] == str(self._gpu_pid) and fields[1].isdigit():
                total += int(fields[1]) * 2**20
        return total


def _float(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _window_median(samples, start, end):
    values = [v for t, v in samples if start <= t <= end]
    return float(np.median(values)) if values else None


def _criterion(value, limit, passed, note=''):
    entry = {'value': value, 'limit': limit, 'passed': bool(passed)}
    if note:
        entry['note'] = note
    return entry


def _counters_consistent(statuses, first, feeder_stats):
    """Return the list of counter inconsistencies (empty when consistent)."""
    problems = []
    for name in COUNTER_FIELDS:
        values = [s[name] for _, s in statuses]
        decreases = sum(1 for a, b in zip(values, values[1:]) if b < a)
        if decreases:
            problems.append(f'{name} decreased {decreases} times')
    if statuses:
        last = statuses[-1][1]
        if last['chunks_produced'] > last['observations_synced']:
            problems.append('more chunks produced than observations synced')
        # Frames queued while the engine loaded may be rejected as too old; none after that.
        rejected = last['inputs_rejected'] - (first or last)['inputs_rejected']
        if rejected:
            problems.append(f'{rejected} valid inputs rejected after warm-up')
        # Each published camera set can give at most one observation. observations_dropped is
        # left out: it also counts synced observations that a newer one replaced in the worker's
        # slot before inference started (the node's status adds the worker's drops to it).
        sets = feeder_stats.get('cameras', {}).get('camera_sets')
        if sets is not None and last['observations_synced'] > sets:
            problems.append(f"more observations synced ({last['observations_synced']}) than "
                            f"camera sets published ({sets})")
    return problems


def summarize(monitor, args, window, feeder_stats, exit_codes, crashed):
    """Compute the report's numbers and criteria over the soak window (monotonic start, end)."""
    start, end = window
    steady = start + args.warmup
    times = np.array([t for t in monitor.command_times if steady <= t <= end])
    periods = np.diff(times) if times.size > 1 else np.empty(0)
    rate = (times.size - 1) / (times[-1] - times[0]) if times.size > 1 else 0.0
    rate_error = (rate - args.control_rate) / args.control_rate if rate else -1.0
    jitter_p99_ms = float(np.percentile(np.abs(periods - periods.mean()), 99) * 1e3) \
        if periods.size else None
    nominal = 1.0 / args.control_rate

    rss = [(t, r) for t, r, _, _, _ in monitor.memory]
    gpu = [(t, g) for t, _, _, _, g in monitor.memory]
    span = max(5.0, 0.05 * (end - start))
    rss_baseline = _window_median(rss, steady, steady + span)
    rss_final = _window_median(rss, end - span, end)
    rss_growth = (rss_final / rss_baseline - 1.0) if rss_baseline and rss_final else None
    steady_rss = np.array([(t, r) for t, r in rss if t >= steady])
    rss_slope = None
    if len(steady_rss) > 2:
        rss_slope = float(np.polyfit(steady_rss[:, 0], steady_rss[:, 1], 1)[0]) * 3600 / 2**20
    gpu_steady = [g for t, g in gpu if t >= steady and g > 0]
    gpu_growth_mib = (max(gpu_steady) - min(gpu_steady)) / 2**20 if gpu_steady else None
    steady_status = [s for t, s in monitor.statuses if steady <= t <= end]
    following = (sum(s['output_state'] == OUTPUT_FOLLOWING for s in steady_status)
                 / len(steady_status)) if steady_status else 0.0
    hold_reasons = {}
    for s in steady_status:
        if s['output_state'] != OUTPUT_FOLLOWING:
            hold_reasons[s['hold_reason']] = hold_reasons.get(s['hold_reason'], 0) + 1
    diag_jitter = [d['jitter_p99_ms'] for t, d in monitor.diagnostics
                   if t >= steady and d['jitter_p99_ms'] is not None]
    blocked = monitor.diagnostics[-1][1]['commands_blocked'] if monitor.diagnostics else 0
    collector = [d for t, d in monitor.diagnostics
                 if t >= steady and d['gc_full_passes'] is not None]
    first = next((s for t, s in monitor.statuses if t >= steady), None)
    last = monitor.statuses[-1][1] if monitor.statuses else None
    counter_problems = _counters_consistent(monitor.statuses, first, feeder_stats)
    latencies = np.array([ms for t, ms, _ in monitor.chunks if t >= steady])

    criteria = {
        'no_crash': _criterion(crashed or 'none', 'none', not crashed),
        'clean_exit': _criterion(exit_codes.get('control'), 0, exit_codes.get('control') == 0),
        'unsafe_commands': _criterion(monitor.unsafe_count, 0, monitor.unsafe_count == 0),
        'commands_blocked_by_node': _criterion(blocked, 0, blocked == 0),
        'rss_growth_after_warmup': _criterion(
            rss_growth, args.max_rss_growth,
            rss_growth is not None and rss_growth < args.max_rss_growth),
        'gpu_memory_growth_mib': _criterion(
            gpu_growth_mib, args.max_gpu_growth_mib,
            gpu_growth_mib is None or gpu_growth_mib <= args.max_gpu_growth_mib,
            '' if gpu_steady else 'no GPU memory in use (CPU run): not applicable'),
        'output_rate_error': _criterion(rate_error, args.max_rate_error,
                                        abs(rate_error) <= args.max_rate_error),
        'control_jitter_p99_ms': _criterion(jitter_p99_ms, args.max_jitter_ms,
                                            jitter_p99_ms is not None
                                            and jitter_p99_ms <= args.max_jitter_ms),
        'following_fraction': _criterion(following, args.min_following,
                                         following >= args.min_following),
        'counters_consistent': _criterion(counter_problems or 'consistent', 'consistent',
                                          not counter_problems),
        'single_control_node_on_the_domain': _criterion(monitor.max_publishers, 1,
                                                        monitor.max_publishers <= 1),
    }

    def delta(name):
        return (last[name] - first[name]) if first and last else None

    return {
        'duration_s': end - start, 'warmup_s': args.warmup,
        'criteria': criteria,
        'passed': all(c['passed'] for c in criteria.values()),
        'commands': {
            'received_after_warmup': int(times.size),
            'expected_after_warmup': int(round((end - steady) * args.control_rate)),
            'output_rate_hz': rate, 'output_rate_error': rate_error,
            'period_ms': {'p50': _pct(periods, 50, 1e3), 'p99': _pct(periods, 99, 1e3),
                          'max': float(periods.max() * 1e3) if periods.size else None},
            'jitter_p99_ms_receive': jitter_p99_ms,
            'gaps_over_2_periods': int(np.count_nonzero(periods > 2 * nominal)),
            'jitter_p99_ms_node_diagnostics': {
                'median': _pct(diag_jitter, 50), 'max': max(diag_jitter, default=None)},
            'unsafe': monitor.unsafe_count, 'non_finite': monitor.non_finite_count,
            'out_of_limits': monitor.out_of_limit_count,
            'first_unsafe': monitor.unsafe_commands[:5],
            'blocked_by_node': blocked},
        'memory': {
            'rss_mib_baseline': rss_baseline / 2**20 if rss_baseline else None,
            'rss_mib_final': rss_final / 2**20 if rss_final else None,
            'rss_growth': rss_growth, 'rss_slope_mib_per_hour': rss_slope,
            'rss_mib_max': max((r for _, r in rss), default=0) / 2**20,
            'gpu_mib_min_max_after_warmup': [min(gpu_steady) / 2**20, max(gpu_steady) / 2**20]
            if gpu_steady else None,
            'status_gpu_memory_used_bytes_last': last['gpu_memory_used_bytes'] if last else None,
            'node_cpu_percent_mean': float(np.mean([c for t, _, _, c, _ in monitor.memory
                                                    if t >= steady] or [0.0]))},
        'inference_latency_ms': {'chunks_after_warmup': int(latencies.size),
                                 'p50': _pct(latencies, 50), 'p99': _pct(latencies, 99)},
        'following_fraction_after_warmup': following,
        'hold_reasons_after_warmup': hold_reasons,
        # The node process's garbage collector (its output diagnostic): full passes after the
        # warm-up, and its longest pause since the engine was ready (every thread waits).
        'node_garbage_collector': {
            'full_passes_after_warmup': int(collector[-1]['gc_full_passes']
                                            - collector[0]['gc_full_passes'])
            if collector else None,
            'pause_max_ms': collector[-1]['gc_pause_max_ms'] if collector else None},
        'counters_final': {name: last[name] for name in COUNTER_FIELDS} if last else None,
        'counters_after_warmup': {name: delta(name) for name in COUNTER_FIELDS},
        'counter_problems': counter_problems,
        'instruction_epochs_seen': len({e for _, _, e in monitor.chunks}),
        # Camera sets the node received, matched and made an observation of, out of those
        # published: the rest were lost in DDS, never converted in time or (rarely) had no joint
        # state at their stamp.
        'camera_sets_matched_fraction': (
            last['observations_synced'] / feeder_stats['cameras']['camera_sets'])
        if last and feeder_stats.get('cameras', {}).get('camera_sets') else None,
        'feeder': feeder_stats,
        'exit_codes': exit_codes,
        'conditions': {'cpu_count': os.cpu_count(), 'load_average_at_end': os.getloadavg(),
                       'device': args.device, 'precision': args.precision,
                       'checkpoint': args.checkpoint or None,
                       'random_model': None if args.checkpoint else args.random_model,
                       'image': f'{args.image_width}x{args.image_height} rgb8 x3',
                       'camera_rate_hz': args.camera_rate, 'joint_rate_hz': args.joint_rate,
                       'control_rate_hz': args.control_rate,
                       'node_parameters': dict(args.node_parameter),
                       'fastdds_profile': args.fastdds_profile,
                       'instruction_period_s': args.instruction_period},
        'note': '' if args.checkpoint else RANDOM_WEIGHTS_NOTE.format(args.random_model),
    }


def startup_times(monitor, spawned: float) -> dict:
    """
    Return the seconds from the node process's start to its first command and chunk.

    'first_policy_command' is the first command after the first chunk: the first that carries
    the policy's actions.
    """
    first_command = monitor.command_times[0] if monitor.command_times else None
    first_chunk = monitor.chunks[0][0] if monitor.chunks else None
    policy_command = next((t for t in monitor.command_times
                           if first_chunk is not None and t >= first_chunk), None)

    def since_spawn(when):
        return None if when is None else when - spawned

    return {'first_command': since_spawn(first_command),
            'first_chunk': since_spawn(first_chunk),
            'first_policy_command': since_spawn(policy_command)}


def _pct(values, q, scale=1.0):
    values = np.asarray(values, dtype=np.float64)
    return float(np.percentile(values, q) * scale) if values.size else None


def write_plots(output, monitor, args, window):
    """Write timeseries.png (RSS, rate, jitter, latency, counters) and control_period.png."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    start, end = window
    steady = args.warmup
    figure, axes = plt.subplots(5, 1, figsize=(11, 14), sharex=True)
    memory = np.array([(t - start, r / 2**20, f / 2**20, g / 2**20)
                       for t, r, f, _, g in monitor.memory]).reshape(-1, 4)
    axis = axes[0]
    axis.plot(memory[:, 0], memory[:, 1], label='control node RSS')
    axis.plot(memory[:, 0], memory[:, 2], label='feeders RSS', lw=0.8)
    if np.any(memory[:, 3] > 0):
        axis.plot(memory[:, 0], memory[:, 3], label='node GPU memory')
    axis.set_ylabel('MiB')
    axis.legend(loc='center right')

    times = np.array(monitor.command_times) - start
    times = times[(times >= 0.0) & (times <= end - start)]
    bin_width = max(1.0, (end - start) / 300.0)
    edges = np.arange(0.0, end - start + 1e-9, bin_width)
    if times.size > 1 and edges.size > 1:
        counts, _ = np.histogram(times, edges)
        axes[1].plot(edges[:-1] + bin_width / 2, counts / bin_width, label='received (DDS)',
                     lw=1.0)
    status_t = np.array([t - start for t, _ in monitor.statuses])
    if status_t.size:
        axes[1].plot(status_t, [s['control_rate_hz'] for _, s in monitor.statuses],
                     label='node ~/status', lw=0.8)
    axes[1].axhline(args.control_rate, color='k', ls=':', lw=0.8)
    axes[1].set_ylabel('output rate [Hz]')
    axes[1].legend(loc='lower right')

    if times.size > 2:
        periods = np.diff(times)
        index = np.digitize(times[1:], edges)
        jitter = [(edges[i - 1] + bin_width / 2,
                   np.percentile(np.abs(periods[index == i] - 1.0 / args.control_rate), 99))
                  for i in np.unique(index)
                  if 0 < i < edges.size and np.count_nonzero(index == i) > 2]
        if jitter:
            jitter = np.array(jitter)
            axes[2].plot(jitter[:, 0], jitter[:, 1] * 1e3, label='received, p99 per bin')
    if monitor.diagnostics:
        axes[2].plot([t - start for t, _ in monitor.diagnostics],
                     [d['jitter_p99_ms'] for _, d in monitor.diagnostics],
                     label='node /diagnostics (sliding)', lw=0.8)
    axes[2].set_ylabel('|period - nominal| p99 [ms]')
    axes[2].legend(loc='upper right')

    if monitor.chunks:
        axes[3].plot([t - start for t, _, _ in monitor.chunks],
                     [ms for _, ms, _ in monitor.chunks], '.', ms=1.5, label='per chunk')
    if status_t.size:
        axes[3].plot(status_t, [s['latency_p99_ms'] for _, s in monitor.statuses],
                     label='p99 (~/status)', lw=0.8)
    axes[3].set_ylabel('inference latency [ms]')
    axes[3].legend(loc='upper right')

    if status_t.size:
        for name in ('observations_dropped', 'chunks_discarded', 'actions_skipped',
                     'inputs_rejected'):
            axes[4].plot(status_t, [s[name] for _, s in monitor.statuses], label=name)
    axes[4].set_ylabel('count (cumulative)')
    axes[4].set_yscale('symlog')
    axes[4].legend(loc='upper left')
    axes[4].set_xlabel('time since the node first followed [s]')
    for axis in axes:
        axis.axvspan(min(0.0, steady), steady, color='0.9', zorder=-1)
        axis.grid(alpha=0.3)
    figure.suptitle(f'pi0_ros soak: {end - start:.0f} s (warm-up shaded)')
    figure.tight_layout()
    figure.savefig(output / 'timeseries.png', dpi=80)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(7, 4))
    steady_times = times[times >= steady]
    if steady_times.size > 1:
        axis.hist(np.diff(steady_times) * 1e3, bins=100, log=True)
    axis.set_xlabel('period between received commands after warm-up [ms]')
    axis.set_ylabel('count')
    axis.set_title('Control period as received over DDS')
    figure.tight_layout()
    figure.savefig(output / 'control_period.png', dpi=80)
    plt.close(figure)


def run_monitor(args):
    """Start the node and the feeder, watch for --duration seconds, report; 0 when all pass."""
    output = Path(args.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    domain_id = args.domain_id if args.domain_id is not None else claim_domain_id()
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain_id), PYTHONUNBUFFERED='1')
    env.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    try:
        args.fastdds_profile = fastdds_profile_env(env, args.fastdds_profile) or 'none'
    except FileNotFoundError as error:
        print(f'pi0_ros soak: {error}', file=sys.stderr)
        return 2
    # This process joins the same domain with the same transports.
    copy_to_environ(env, ('ROS_DOMAIN_ID', 'ROS_AUTOMATIC_DISCOVERY_RANGE',
                          FASTDDS_PROFILE_VARIABLE))
    for role in FEEDER_STREAMS:
        (output / f'feeder_{role}.json').unlink(missing_ok=True)

    import rclpy

    from pi0_ros.executors import freeze_loaded_objects

    model = (f'checkpoint {args.checkpoint}' if args.checkpoint
             else f'random {args.random_model} model')
    print(f'pi0_ros soak: {args.duration:.0f} s (warm-up {args.warmup:.0f} s), {model}, device '
          f'{args.device}, ROS_DOMAIN_ID={domain_id}, Fast DDS profile {args.fastdds_profile}; '
          f'report in {output}', flush=True)
    spawned = time.monotonic()  # the start-up figures count from here (as ros2 launch would)
    control = Process('control', [sys.executable, '-m', 'pi0_ros.node'] + ros_args(
        {'checkpoint': args.checkpoint, 'random_model': args.random_model, 'device': args.device,
         'precision': args.precision, 'control_rate': args.control_rate, 'status_rate': 2.0,
         'max_image_width': max(args.image_width, 64),
         'max_image_height': max(args.image_height, 64), **dict(args.node_parameter)}),
        env, output)
    feeders = [Process(f'feeder_{role}', [
        sys.executable, '-m', 'pi0_ros.tools.soak', '--feeder', role,
        '--feeder-stats', str(output / f'feeder_{role}.json'),
        '--camera-rate', str(args.camera_rate), '--joint-rate', str(args.joint_rate),
        '--image-width', str(args.image_width), '--image-height', str(args.image_height),
        '--instruction-period', str(args.instruction_period)], env, output)
        for role in FEEDER_STREAMS]
    processes = [control, *feeders]
    rclpy.init(args=[])  # not sys.argv: a NAME:=VALUE option would read as a ROS remap
    node = rclpy.create_node('pi0_soak_monitor')
    monitor = Monitor(node, control.popen.pid, [f.popen.pid for f in feeders])
    crashed = ''
    window = (time.monotonic(), time.monotonic())
    begin = None
    try:
        started = time.monotonic()
        while time.monotonic() - started < args.startup_timeout:
            rclpy.spin_once(node, timeout_sec=0.1)
            if monitor.statuses and monitor.statuses[-1][1]['output_state'] == OUTPUT_FOLLOWING:
                break
            if not all(p.alive() for p in processes):
                crashed = 'a process exited during start-up'
                break
        else:
            crashed = f'the node did not follow the policy within {args.startup_timeout:.0f} s'
        print(f'following after {time.monotonic() - started:.1f} s of start-up', flush=True)
        freeze_loaded_objects()  # this process times what it receives: no full passes
        begin = time.monotonic()
        next_sample = next_print = begin
        monitor.start_sampling(1.0)
        while not crashed and time.monotonic() - begin < args.duration:
            rclpy.spin_once(node, timeout_sec=0.02)
            now = time.monotonic()
            if now >= next_sample:
                monitor.count_publishers()
                next_sample += 1.0
                for process in processes:
                    if not process.alive():
                        crashed = f'{process.name} exited with {process.popen.returncode}'
            if now >= next_print:
                print(progress_line(now - begin, args, monitor), flush=True)
                next_print += max(10.0, args.duration / 60.0)
        window = (begin, time.monotonic())
    except KeyboardInterrupt:
        crashed = 'interrupted'
        if begin is not None:  # report what was recorded up to the interruption
            window = (begin, time.monotonic())
    finally:
        monitor.stop_sampling()
        exit_codes = {p.name: p.stop() for p in reversed(processes)}
        node.destroy_node()
        rclpy.try_shutdown()
    feeder_stats = {role: json.loads((output / f'feeder_{role}.json').read_text())
                    for role in FEEDER_STREAMS if (output / f'feeder_{role}.json').exists()}
    summary = summarize(monitor, args, window, feeder_stats, exit_codes, crashed)
    summary['startup_s'] = startup_times(monitor, spawned)
    summary['command'] = 'python -m pi0_ros.tools.soak ' + ' '.join(sys.argv[1:])
    (output / 'summary.json').write_text(json.dumps(summary, indent=2, default=_json_default))
    write_plots(output, monitor, args, window)
    failed = [name for name, c in summary['criteria'].items() if not c['passed']]
    commands = summary['commands']
    memory = summary['memory']
    print(f"output {commands['output_rate_hz']:.2f} Hz (error "
          f"{commands['output_rate_error']:+.4f}), jitter p99 "
          f"{commands['jitter_p99_ms_receive'] or 0:.2f} ms, unsafe {commands['unsafe']}, RSS "
          f"{memory['rss_mib_baseline'] or 0:.0f} -> "
          f"{memory['rss_mib_final'] or 0:.0f} MiB ({(memory['rss_growth'] or 0) * 100:+.2f} %)")
    startup = summary['startup_s']
    if startup['first_policy_command'] is not None:
        print(f"first command from a chunk {startup['first_policy_command']:.1f} s after the "
              f"node process started (first chunk {startup['first_chunk']:.1f} s)")
    print(f'report: {output}/summary.json, timeseries.png, control_period.png')
    if failed:
        for name in failed:
            print(f"FAILED: {name}: {summary['criteria'][name]}", file=sys.stderr)
        print(f'--- last lines of control.log ---\n{control.tail()}', file=sys.stderr)
        return 1
    return 0


def progress_line(elapsed, args, monitor):
    status = monitor.statuses[-1][1] if monitor.statuses else {}
    rss = monitor.memory[-1][1] / 2**20 if monitor.memory else 0.0
    return (f'[{elapsed:6.0f}/{args.duration:.0f} s] commands {len(monitor.command_times)}, '
            f"rate {status.get('control_rate_hz', 0.0):5.1f} Hz, RSS {rss:6.0f} MiB, chunks "
            f"{status.get('chunks_produced', 0)}, dropped {status.get('observations_dropped', 0)}"
            f", unsafe {monitor.unsafe_count}")


def _json_default(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def main(argv=None):
    """Run the soak (or, with the hidden --feeder flag, its feeder process)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return run_feeder(args) if args.feeder else run_monitor(args)


if __name__ == '__main__':
    sys.exit(main())
