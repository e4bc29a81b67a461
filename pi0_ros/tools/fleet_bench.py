# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Fleet benchmark: N arms on one engine (pi0_ros.fleet), each fed like a robot, per arm measured.

`python -m pi0_ros.tools.fleet_bench --arms 1,2,4,8 --duration 30 --device cuda --random-model
full --output reports/fleet` runs, for each N, the fleet process with robots arm1..armN, and per
arm the soak's two feeder processes in the arm's namespace (three cameras and the instruction;
joint states that track the commands). Once every arm follows the policy it records --duration
seconds, per arm: chunks per second (~/action_chunk), the engine call that made each chunk
(ActionChunk.total_ms: the whole batch), the chunk latency (its reception by this process's
middleware minus the camera stamp of its observation: synchronization, batch wait, inference
and delivery; the node's diagnostics split its part outside the engine call), commands per
second against control_rate (received here, and the fixed-rate ticks as the node reports them in
~/status: with publish_on_chunk the node also publishes between ticks), and every command
checked against the joint limits, and the full passes and longest pause of the garbage collector
in the arm's process (its output diagnostic). Writes
fleet.json, fleet.png and the processes' logs (logs/) to --output. Default: the tiny random model
on the CPU. --processes K splits the arms over K fleet processes, an engine each, as
fleet.launch.py's processes:=K does.
"""
import argparse
import json
import os
from pathlib import Path
import sys
import time

import numpy as np

from pi0_ros.launch_arguments import fleet_process_remaps, split_robots
from pi0_ros.parameters import SO101_MAX_VELOCITY, SO101_POSITION_LOWER, SO101_POSITION_UPPER
from pi0_ros.tools.domain import claim_domain_id
from pi0_ros.tools.processes import (copy_to_environ, fastdds_profile_env,
                                     FASTDDS_PROFILE_VARIABLE, node_parameter, Process, ros_args)
from pi0_ros.tools.soak import FEEDER_STREAMS

OUTPUT_FOLLOWING = 1
# Seconds between every arm following and the recorded window (what queued here is taken).
SETTLE_S = 1.0


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--arms', default='1,2', help='arm counts to run, e.g. 1,2,4,8')
    parser.add_argument('--duration', type=float, default=20.0, help='seconds recorded per count')
    parser.add_argument('--output', default='reports/fleet', help='report folder')
    parser.add_argument('--checkpoint', default='', help='LeRobot pi0 checkpoint directory')
    parser.add_argument('--random-model', choices=('tiny', 'full'), default='tiny')
    parser.add_argument('--device', default='cpu', help='auto | cpu | cuda | cuda:N')
    parser.add_argument('--precision', default='auto', help='auto | fp32 | bf16 | fp16')
    parser.add_argument('--batch-wait', type=float, default=0.005,
                        help="seconds an observation waits for the other arms' (fleet batch_wait)")
    parser.add_argument('--max-batch', type=int, default=0,
                        help='observations per engine call (fleet max_batch; 0 = one per arm)')
    parser.add_argument('--processes', type=int, default=1,
                        help='fleet processes, each with its own engine and a contiguous share of '
                             'the arms (arm1..armN split evenly)')
    parser.add_argument('--node-parameter', type=node_parameter, action='append', default=[],
                        metavar='NAME:=VALUE', help='another parameter of every robot node')
    parser.add_argument('--control-rate', type=float, default=50.0)
    parser.add_argument('--camera-rate', type=float, default=30.0)
    parser.add_argument('--joint-rate', type=float, default=200.0)
    parser.add_argument('--image-width', type=int, default=640)
    parser.add_argument('--image-height', type=int, default=480)
    parser.add_argument('--startup-timeout', type=float, default=300.0)
    args = parser.parse_args(argv)
    args.arm_counts = [int(n) for n in args.arms.split(',') if n.strip()]
    if not args.arm_counts or min(args.arm_counts) < 1:
        parser.error('--arms needs counts >= 1')
    if args.processes < 1:
        parser.error('--processes needs 1 or more')
    return args


class ArmRecord:
    """What one arm's node publishes, as this process receives it."""

    def __init__(self, node, robot):
        from trajectory_msgs.msg import JointTrajectory

        from pi0_ros.msg import ActionChunk, PolicyStatus
        self.robot = robot
        self.clock = node.get_clock()
        # chunks: (t, engine ms, age, engine stage ms)
        self.command_times, self.chunks, self.state = [], [], None
        # (t, the node's own rate of fixed-rate control ticks: PolicyStatus.control_rate_hz,
        # which leaves out the commands that publish_on_chunk adds between the ticks)
        self.tick_rates = []
        # (t, full passes of the garbage collector, its longest pause in ms): the arm's process's
        # own, from its output diagnostic
        self.gc_pauses = []
        # (t, observation age at call p99 ms, chunk wait for the output stage p99 ms): the node's
        # own split of a chunk's time outside its engine call, over its recent chunks
        self.wait_splits = []
        self.unsafe = 0
        node.create_subscription(JointTrajectory, f'/{robot}/joint_trajectory', self.on_command,
                                 50)
        node.create_subscription(ActionChunk, f'/{robot}/pi0_ros/action_chunk', self.on_chunk,
                                 50)
        node.create_subscription(PolicyStatus, f'/{robot}/pi0_ros/status', self.on_status, 10)

    def on_command(self, msg):
        self.command_times.append(time.monotonic())
        positions = np.array([p.positions for p in msg.points], dtype=np.float64)
        velocities = np.array([p.velocities for p in msg.points], dtype=np.float64)
        if positions.size == 0 or not (
                np.all(np.isfinite(positions)) and np.all(np.isfinite(velocities))
                and np.all(positions >= np.array(SO101_POSITION_LOWER) - 1e-9)
                and np.all(positions <= np.array(SO101_POSITION_UPPER) + 1e-9)
                and np.all(np.abs(velocities) <= np.array(SO101_MAX_VELOCITY) + 1e-6)):
            self.unsafe += 1

    def on_chunk(self, msg, info):
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        # When the middleware received it (the wall clock, as the stamps here): a backlog in
        # this process's executor is not the node's latency.
        received_ns = info.get('received_timestamp') or self.clock.now().nanoseconds
        age_ms = (received_ns * 1e-9 - stamp) * 1e3
        stages = (msg.preprocess_ms, msg.vision_ms, msg.prefix_ms, msg.denoise_ms)
        self.chunks.append((time.monotonic(), float(msg.total_ms), age_ms, stages))

    def on_status(self, msg):
        self.state = msg.output_state
        self.tick_rates.append((time.monotonic(), float(msg.control_rate_hz)))

    def on_diagnostics(self, entries):
        """Take the figures this benchmark reports from the arm's node's diagnostic entries."""
        from pi0_ros.diagnostics import (CALL_AGE_P99_KEY, GC_FULL_PASSES_KEY,
                                         GC_PAUSE_MAX_MS_KEY, OUTPUT_WAIT_P99_KEY)
        values = {kv.key: kv.value for entry in entries for kv in entry.values}
        now = time.monotonic()
        if GC_FULL_PASSES_KEY in values:
            self.gc_pauses.append((now, int(values[GC_FULL_PASSES_KEY]),
                                   float(values[GC_PAUSE_MAX_MS_KEY])))
        if CALL_AGE_P99_KEY in values and OUTPUT_WAIT_P99_KEY in values:
            self.wait_splits.append((now, float(values[CALL_AGE_P99_KEY]),
                                     float(values[OUTPUT_WAIT_P99_KEY])))

    def summary(self, begin, end, control_rate):
        """Return this arm's figures over the window [begin, end] (monotonic seconds)."""
        seconds = end - begin
        commands = sum(begin <= t <= end for t in self.command_times)
        chunks = [(ms, age, stages) for t, ms, age, stages in self.chunks if begin <= t <= end]
        engine = [ms for ms, _, _ in chunks]
        ages = [age for _, age, _ in chunks]
        # A chunk's age outside its engine call: the frames' age when the call took them, the
        # waits for the GPU turn, the batch and the tick, and the transport.
        waits = [age - ms for ms, age, _ in chunks]

        def pct(values, q):
            return round(float(np.percentile(values, q)), 2) if values else None
        rate = commands / seconds
        tick_rates = [hz for t, hz in self.tick_rates if begin <= t <= end and hz > 0]
        tick_rate = float(np.median(tick_rates)) if tick_rates else 0.0
        gc_pauses = [(passes, ms) for t, passes, ms in self.gc_pauses if begin <= t <= end]
        wait_splits = [(age, wait) for t, age, wait in self.wait_splits if begin <= t <= end]
        return {'robot': self.robot, 'chunks_per_s': round(len(chunks) / seconds, 2),
                'engine_call_p50_ms': pct(engine, 50), 'engine_call_p99_ms': pct(engine, 99),
                'chunk_latency_p50_ms': pct(ages, 50), 'chunk_latency_p99_ms': pct(ages, 99),
                'chunk_wait_p50_ms': pct(waits, 50), 'chunk_wait_p99_ms': pct(waits, 99),
                # The node's split of that wait, its last report in the window (its recent 200
                # chunks): the observation's age when its call began (sync, the batch's and the
                # GPU turn's waits), and the chunk's wait from the call's end to the command
                # that first uses it.
                'call_age_p99_ms': round(wait_splits[-1][0], 2) if wait_splits else None,
                'output_wait_p99_ms': round(wait_splits[-1][1], 2) if wait_splits else None,
                # The engine's stage times of the call (GPU events; preprocess includes the
                # frames' upload).
                'engine_stages_p50_ms': {
                    name: pct([stages[index] for _, _, stages in chunks], 50)
                    for index, name in enumerate(('preprocess', 'vision', 'prefix', 'denoise'))},
                'commands_per_s': round(rate, 2),
                'command_rate_error_pct': round((rate - control_rate) / control_rate * 100, 2),
                # The fixed-rate ticks as the node counts them (median of its status reports).
                'tick_rate_hz': round(tick_rate, 2),
                'tick_rate_error_pct': round((tick_rate - control_rate) / control_rate * 100, 2),
                # The collector's full passes in the window and its longest pause since the
                # engine was ready, in this arm's process (every thread waits for the GIL).
                'gc_full_passes': gc_pauses[-1][0] - gc_pauses[0][0] if gc_pauses else None,
                'gc_pause_max_ms': round(gc_pauses[-1][1], 2) if gc_pauses else None,
                'unsafe_commands': self.unsafe}


def dispatch_diagnostics(array, arms):
    """Hand each arm its node's diagnostic entries ('/<robot>/<node>: ...')."""
    for arm in arms:
        entries = [entry for entry in array.status if entry.name.startswith(f'/{arm.robot}/')]
        if entries:
            arm.on_diagnostics(entries)


def run_count(count, args, logs, env):
    """Run the fleet with `count` arms (process logs in `logs`); return its figures."""
    from diagnostic_msgs.msg import DiagnosticArray
    import rclpy

    from pi0_ros.executors import freeze_loaded_objects

    robots = [f'arm{index + 1}' for index in range(count)]
    groups = split_robots(robots, args.processes)
    fleets = [Process(f'fleet_{count}' + (f'_{index + 1}' if len(groups) > 1 else ''),
                      [sys.executable, '-m', 'pi0_ros.fleet'] + ros_args(
        {'robots': group, 'batch_wait': args.batch_wait, 'max_batch': args.max_batch,
         'checkpoint': args.checkpoint,
         'random_model': args.random_model, 'device': args.device, 'precision': args.precision,
         'control_rate': args.control_rate, 'status_rate': 2.0,
         'max_image_width': max(args.image_width, 64),
         'max_image_height': max(args.image_height, 64), **dict(args.node_parameter)},
        remaps=fleet_process_remaps(index, len(groups))), env, logs)
              for index, group in enumerate(groups)]
    feeders = [Process(f'feeder_{count}_{robot}_{role}', [
        sys.executable, '-m', 'pi0_ros.tools.soak', '--feeder', role, '--feeder-namespace', robot,
        '--camera-rate', str(args.camera_rate), '--joint-rate', str(args.joint_rate),
        '--image-width', str(args.image_width), '--image-height', str(args.image_height),
        '--instruction-period', '1000'], env, logs)
        for robot in robots for role in FEEDER_STREAMS]
    processes = [*fleets, *feeders]
    node = rclpy.create_node(f'pi0_fleet_bench_{count}')
    arms = [ArmRecord(node, robot) for robot in robots]
    node.create_subscription(DiagnosticArray, '/diagnostics',
                             lambda array: dispatch_diagnostics(array, arms), 50)
    result = {'arms': count, 'processes': len(fleets), 'error': ''}
    try:
        started = time.monotonic()
        while not all(arm.state == OUTPUT_FOLLOWING for arm in arms):
            rclpy.spin_once(node, timeout_sec=0.1)
            if not all(p.alive() for p in processes):
                result['error'] = 'a process exited during start-up'
                break
            if time.monotonic() - started > args.startup_timeout:
                result['error'] = f'not every arm followed within {args.startup_timeout:.0f} s'
                break
        result['startup_s'] = round(time.monotonic() - started, 1)
        print(f'{count} arm(s): following after {result["startup_s"]} s', flush=True)
        freeze_loaded_objects()  # this process times what it receives: no full passes
        # What queued here meanwhile (spin_once takes one message per call) is taken before the
        # window, so that a backlog does not count as a burst of commands within it.
        settled = time.monotonic() + SETTLE_S
        while time.monotonic() < settled:
            rclpy.spin_once(node, timeout_sec=0.02)
        begin = time.monotonic()
        while not result['error'] and time.monotonic() - begin < args.duration:
            rclpy.spin_once(node, timeout_sec=0.02)
        end = time.monotonic()
    finally:
        exit_codes = {p.name: p.stop() for p in reversed(processes)}
        node.destroy_node()
    if result['error']:
        result['log_tail'] = '\n'.join(fleet.tail(30) for fleet in fleets)
        return result
    per_arm = [arm.summary(begin, end, args.control_rate) for arm in arms]
    result.update(
        per_arm=per_arm, exit_codes=exit_codes,
        chunks_per_s_per_arm_min=min(a['chunks_per_s'] for a in per_arm),
        chunks_per_s_total=round(sum(a['chunks_per_s'] for a in per_arm), 2),
        chunk_latency_p99_ms_max=max(a['chunk_latency_p99_ms'] or 0 for a in per_arm),
        chunk_wait_p99_ms_max=max(a['chunk_wait_p99_ms'] or 0 for a in per_arm),
        call_age_p99_ms_max=max(a['call_age_p99_ms'] or 0 for a in per_arm),
        output_wait_p99_ms_max=max(a['output_wait_p99_ms'] or 0 for a in per_arm),
        engine_call_p50_ms_median=float(np.median([a['engine_call_p50_ms'] or 0
                                                   for a in per_arm])),
        command_rate_error_pct_max_abs=max(abs(a['command_rate_error_pct']) for a in per_arm),
        tick_rate_error_pct_max_abs=max(abs(a['tick_rate_error_pct']) for a in per_arm),
        gc_pause_max_ms=max((a['gc_pause_max_ms'] or 0 for a in per_arm), default=0),
        unsafe_commands=sum(a['unsafe_commands'] for a in per_arm))
    return result


def write_plot(path, results):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    done = [r for r in results if not r['error']]
    counts = [r['arms'] for r in done]
    figure, (rates, latency) = plt.subplots(1, 2, figsize=(11, 4))
    rates.plot(counts, [r['chunks_per_s_per_arm_min'] for r in done], 'o-',
               label='per arm (slowest)')
    rates.plot(counts, [r['chunks_per_s_total'] for r in done], 's--', label='all arms')
    rates.set(xlabel='arms on one engine', ylabel='chunks / s', title='Chunk rate')
    latency.plot(counts, [r['chunk_latency_p99_ms_max'] for r in done], 'o-',
                 label='chunk latency p99 (camera stamp to chunk)')
    latency.plot(counts, [r['engine_call_p50_ms_median'] for r in done], 's--',
                 label='engine call p50 (the batch)')
    latency.set(xlabel='arms on one engine', ylabel='ms', title='Latency')
    for axes in (rates, latency):
        axes.set_xticks(counts)
        axes.grid(alpha=0.3)
        axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv=None):
    """Run every arm count; 1 if a count failed to start or published an unsafe command."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    output = Path(args.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, ROS_DOMAIN_ID=str(claim_domain_id()), PYTHONUNBUFFERED='1')
    env.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    fastdds_profile_env(env, None)
    copy_to_environ(env, ('ROS_DOMAIN_ID', 'ROS_AUTOMATIC_DISCOVERY_RANGE',
                          FASTDDS_PROFILE_VARIABLE))
    import rclpy
    rclpy.init(args=[])
    results = []
    logs = output / 'logs'
    logs.mkdir(exist_ok=True)
    try:
        for count in args.arm_counts:
            result = run_count(count, args, logs, env)
            results.append(result)
            if result['error']:
                print(f"{count} arm(s): {result['error']}\n{result.get('log_tail', '')}",
                      file=sys.stderr, flush=True)
            else:
                print(f"{count} arm(s): {result['chunks_per_s_per_arm_min']:.1f} chunks/s per "
                      f"arm (slowest), chunk latency p99 {result['chunk_latency_p99_ms_max']:.1f}"
                      f" ms (outside the call {result['chunk_wait_p99_ms_max']:.1f} ms: age at "
                      f"call {result['call_age_p99_ms_max']:.1f}, wait for the output stage "
                      f"{result['output_wait_p99_ms_max']:.1f}), engine "
                      f"call p50 {result['engine_call_p50_ms_median']:.1f} ms, "
                      f"command rate error {result['command_rate_error_pct_max_abs']:.2f} % "
                      f"(ticks {result['tick_rate_error_pct_max_abs']:.2f} %), "
                      f"unsafe {result['unsafe_commands']}", flush=True)
    finally:
        rclpy.try_shutdown()
    report = {'command': 'python -m pi0_ros.tools.fleet_bench ' + ' '.join(
        sys.argv[1:] if argv is None else argv), 'settings': {
        key: value for key, value in vars(args).items() if key != 'node_parameter'},
        'results': results}
    (output / 'fleet.json').write_text(json.dumps(report, indent=2))
    write_plot(output / 'fleet.png', results)
    print(f'report: {output}/fleet.json, fleet.png')
    return 1 if any(r['error'] or r.get('unsafe_commands') for r in results) else 0


if __name__ == '__main__':
    sys.exit(main())
