# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
A fleet's input executor against the robots it serves: QoS event handlers and executors (CPU).

rclpy's executors rebuild their wait set from every entity of every node they spin on each wait,
and check each ready waitable (a QoS event handler is one) against the list of all of them: the
work per message grows with the robots one executor serves. This runs N stand-in robot nodes,
each with a configured Pi0ControlNode's subscriptions (9), timers (2), services (13) and
publishers (5), fed from another process as the fleet benchmark feeds its arms (three cameras at
30 Hz and joint states at 200 Hz per robot; small frames: the cost measured is per message, not
per byte). Modes, executor/handlers[/control]:

- executor `shared`: one SingleThreadedExecutor for every robot's node (as pi0_ros.fleet);
  `per_robot`: one per robot, each on its own thread; `events`: one rclpy.experimental.
  EventsExecutor (Jazzy, C++) for every robot's node (measured, not used by the node: in a quick
  test, a thread publishing to a topic that the same process subscribes to through it hung);
- handlers `all`: rclpy's default QoS event handlers on every publisher and subscription (28 per
  robot: the node before pi0_ros.qos.NO_SUBSCRIPTION_EVENTS); `node`: those the node makes now
  (16); `none`: none (what the executor costs without them);
- control (optional; none without it): every robot's control timer at --control-rate on one
  control thread, as pi0_ros.fleet runs them, each tick publishing a two-point JointTrajectory.
  `each`: a timer per robot node (the fleet before SharedControlTimers), their phases spread over
  the period as the robots' configure transitions, one after another, spread them; `shared`: one
  timer per period on a node of its own (pi0_ros.executors.SharedControlTimers).

Per mode and N: the messages received per second against those sent, the delay from a message's
header stamp to its callback (p50/p99), the process's CPU seconds per second, and how long a
thread that sleeps 1 ms at a time (as the inference thread waits on the GPU) waits beyond it
(p50/p99; about 0.1 ms with nothing else running): what every Python step of the fleet's
inference and control threads loses to the GIL. With control timers also: the control thread's
CPU seconds per second, the ticks per second of all robots and the p99 of a robot's tick interval.

    python benchmarks/executor_scaling.py --arms 1,4,8 --seconds 10 --json executor_scaling.json
"""
import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time

import numpy as np
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, String
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from pi0_ros.executors import (CallbackGroupThread, reuse_large_allocations, SharedControlTimers,
                               SWITCH_INTERVAL_S, ThreadBoundCallbackGroup)
from pi0_ros.qos import (LATCHED, NO_PUBLISHER_EVENTS, NO_SUBSCRIPTION_EVENTS, VOLATILE_BEST_EFFORT,
                         VOLATILE_RELIABLE, warn_incompatible_publishers)

CAMERAS = ('camera1', 'camera2', 'camera3')


class StandInRobot(LifecycleNode):
    """
    A node with a configured Pi0ControlNode's entities; its callbacks record delays.

    handlers 'node': the QoS event handlers the control node makes (pi0_ros.qos: none on the
    stricter command subscriptions and on the report publishers); 'all': rclpy's defaults on
    every publisher and subscription (the node before this benchmark's commit); 'none': none.
    """

    def __init__(self, name, context, handlers):
        super().__init__('pi0_control', namespace=name, context=context)
        self.delays = []
        logger = self.get_logger()
        quiet = {} if handlers == 'all' else {'event_callbacks': NO_SUBSCRIPTION_EVENTS}
        warn = (lambda topic: quiet) if handlers != 'node' else (
            lambda topic: {'event_callbacks': warn_incompatible_publishers(logger, topic, 5.0)})
        for topic in CAMERAS:
            self.create_subscription(Image, f'{topic}/image_raw', self._on_stamped,
                                     qos_profile_sensor_data, **warn(topic))
        self.create_subscription(JointState, 'joint_states', self._on_stamped,
                                 qos_profile_sensor_data, **warn('joint_states'))
        # The instruction and the e-stop as AnyPublisherSubscription makes them (2 and 3).
        for topic, kind, profiles in (('instruction', String, (LATCHED, VOLATILE_RELIABLE)),
                                      ('pi0_ros/estop', Bool, (LATCHED, VOLATILE_RELIABLE,
                                                               VOLATILE_BEST_EFFORT))):
            for index, profile in enumerate(profiles):
                events = warn(topic) if index == len(profiles) - 1 else quiet
                self.create_subscription(kind, topic, lambda msg: None, profile, **events)
        report = {} if handlers == 'all' else {'event_callbacks': NO_PUBLISHER_EVENTS}
        command = {} if handlers != 'none' else report
        self.trajectory = self.create_publisher(JointTrajectory, 'joint_trajectory', 1, **command)
        self.ticks = []
        for topic in ('pi0_ros/action_chunk', 'pi0_ros/status', '/diagnostics'):
            self.create_publisher(String, topic, 10, **report)
        self.create_service(SetBool, 'pi0_ros/enable', lambda request, response: response)
        self.create_timer(0.2, lambda: None)
        self.create_timer(0.5, lambda: None)

    def control_tick(self):
        """Publish a two-point trajectory, as a control tick does; record the tick's time."""
        self.ticks.append(time.monotonic())
        msg = JointTrajectory(joint_names=[f'j{i}' for i in range(6)])
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.points = [JointTrajectoryPoint(positions=[0.1 * k] * 6) for k in range(2)]
        self.trajectory.publish(msg)

    def _on_stamped(self, msg):
        now = time.time()
        self.delays.append(now - (msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9))

    def entity_counts(self):
        return {kind: len(list(getattr(self, kind))) for kind in
                ('subscriptions', 'timers', 'services', 'publishers', 'waitables')}


def feed(arms, camera_rate, joint_rate, width, height):
    """Publish every robot's cameras and joint states until killed (the feeder process)."""
    rclpy.init()
    node = rclpy.create_node('feeder')
    names = [f'arm{i + 1}' for i in range(arms)]
    cameras = [[node.create_publisher(Image, f'/{n}/{c}/image_raw', 5) for c in CAMERAS]
               for n in names]
    joints = [node.create_publisher(JointState, f'/{n}/joint_states', 5) for n in names]
    image = Image(width=width, height=height, encoding='rgb8', step=width * 3,
                  data=bytes(width * height * 3))
    state = JointState(name=[f'j{i}' for i in range(6)], position=[0.0] * 6)
    start = time.monotonic()
    tick = camera_ticks = 0
    while True:
        stamp = node.get_clock().now().to_msg()
        state.header.stamp = stamp
        for publisher in joints:
            publisher.publish(state)
        if tick * camera_rate >= camera_ticks * joint_rate:
            camera_ticks += 1
            image.header.stamp = stamp
            for robot in cameras:
                for publisher in robot:
                    publisher.publish(image)
        tick += 1
        time.sleep(max(0.0, start + tick / joint_rate - time.monotonic()))


def thread_cpu_s(native_id):
    """CPU seconds of one thread of this process (user + system)."""
    with open(f'/proc/self/task/{native_id}/stat') as stream:
        fields = stream.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def start_control(mode, robots, context, rate):
    """Start the robots' control timers on one thread (mode each or shared); return it."""
    group = ThreadBoundCallbackGroup()
    if mode == 'each':
        for robot in robots:  # a robot's timer keeps the phase of its configure: spread them
            robot.create_timer(1.0 / rate, robot.control_tick, callback_group=group)
            time.sleep(1.0 / rate / len(robots))
        served = robots
    else:
        served = LifecycleNode('fleet', context=context)
        timers = SharedControlTimers(served, group)
        for robot in robots:
            timers.create_timer(1.0 / rate, robot.control_tick, robot.get_clock())
    thread = CallbackGroupThread(served, group, name='control', rescan_s=0.5)
    thread.start()
    return thread


def process_cpu_s():
    """CPU seconds of this process (user + system)."""
    times = os.times()
    return times.user + times.system


def gil_probe(stop, waits):
    """Sleep 1 ms at a time; record how much longer than 1 ms each sleep took (s)."""
    while not stop.is_set():
        start = time.perf_counter()
        time.sleep(0.001)
        waits.append(time.perf_counter() - start - 0.001)


def measure(mode, arms, seconds, args):
    """Spin `arms` stand-in robots in `mode`; return the figures of `seconds` of feeding."""
    context = rclpy.Context()
    rclpy.init(context=context)
    executor_kind, handlers, control_mode = (mode.split('/') + ['none'])[:3]
    robots = [StandInRobot(f'arm{i + 1}', context, handlers) for i in range(arms)]
    control = (None if control_mode == 'none'
               else start_control(control_mode, robots, context, args.control_rate))
    served = [robots] if executor_kind in ('shared', 'events') else [[robot] for robot in robots]
    if executor_kind == 'events':
        from rclpy.experimental import EventsExecutor
        executors = [EventsExecutor(context=context)]
    else:
        executors = [SingleThreadedExecutor(context=context) for _ in served]
    for executor, nodes in zip(executors, served):
        for robot in nodes:
            executor.add_node(robot)
    spinning = threading.Event()
    spinning.set()

    def spin(executor):  # until `spinning` is cleared: shutdown() under a spin races in rclpy
        while spinning.is_set():
            executor.spin_once(timeout_sec=0.1)
    threads = [threading.Thread(target=spin, args=(executor,), daemon=True)
               for executor in executors]
    for thread in threads:
        thread.start()
    feeder = subprocess.Popen([sys.executable, __file__, '--feed', str(arms),
                               '--camera-rate', str(args.camera_rate),
                               '--joint-rate', str(args.joint_rate),
                               '--width', str(args.width), '--height', str(args.height)])
    try:
        time.sleep(3.0)  # discovery
        for robot in robots:
            robot.delays.clear()
            robot.ticks.clear()
        stop, waits = threading.Event(), []
        probe = threading.Thread(target=gil_probe, args=(stop, waits), daemon=True)
        control_cpu_start = thread_cpu_s(control.native_id) if control else 0.0
        cpu_start, wall_start = process_cpu_s(), time.monotonic()
        probe.start()
        time.sleep(seconds)
        stop.set()
        probe.join()
        wall = time.monotonic() - wall_start
        cpu = process_cpu_s() - cpu_start
        control_cpu = thread_cpu_s(control.native_id) - control_cpu_start if control else 0.0
        delays = np.concatenate([np.asarray(robot.delays) for robot in robots]) * 1e3
        received = sum(len(robot.delays) for robot in robots)
    finally:
        if control is not None:
            control.stop()
        feeder.kill()
        feeder.wait()
        spinning.clear()
        for thread in threads:
            thread.join(timeout=2.0)
        for executor in executors:
            executor.shutdown(timeout_sec=1.0)
        counts = robots[0].entity_counts()
        for robot in robots:
            robot.destroy_node()
        rclpy.shutdown(context=context)
    sent = arms * (len(CAMERAS) * args.camera_rate + args.joint_rate) * wall
    waits = np.asarray(waits) * 1e3
    figures = {}
    if control is not None:
        intervals = np.concatenate([np.diff(robot.ticks) for robot in robots]) * 1e3
        figures = {'control_rate': args.control_rate,
                   'control_thread_cpu_s_per_s': round(control_cpu / wall, 3),
                   'control_ticks_per_s': round(sum(len(r.ticks) for r in robots) / wall, 1),
                   'control_interval_p99_ms': round(float(np.percentile(intervals, 99)), 3)}
    return {**figures, 'mode': mode, 'arms': arms, 'executor_threads': len(executors),
            'entities_per_robot': counts,
            'received_per_s': round(received / wall, 1), 'sent_per_s': round(sent / wall, 1),
            'received_fraction': round(received / sent, 3),
            'delay_p50_ms': round(float(np.percentile(delays, 50)), 3),
            'delay_p99_ms': round(float(np.percentile(delays, 99)), 3),
            'process_cpu_s_per_s': round(cpu / wall, 3),
            'probe_gil_wait_p50_ms': round(float(np.percentile(waits, 50)), 3),
            'probe_gil_wait_p99_ms': round(float(np.percentile(waits, 99)), 3)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--arms', default='1,4,8', help='robot counts')
    parser.add_argument('--modes', default='shared/all,shared/node,per_robot/node',
                        help='executor/handlers[/control]: shared, per_robot or events / all, '
                             'node or none [/ each or shared]')
    parser.add_argument('--control-rate', type=float, default=100.0, help='Hz, with control')
    parser.add_argument('--seconds', type=float, default=10.0, help='measured per run')
    parser.add_argument('--camera-rate', type=float, default=30.0)
    parser.add_argument('--joint-rate', type=float, default=200.0)
    parser.add_argument('--width', type=int, default=64)
    parser.add_argument('--height', type=int, default=48)
    parser.add_argument('--switch-interval', type=float, default=SWITCH_INTERVAL_S,
                        help='sys.setswitchinterval (s)')
    parser.add_argument('--reuse-large-allocations', action='store_true',
                        help='in the measured process only (not the feeder), as the node and '
                             'the fleet set it: pi0_ros.executors.reuse_large_allocations')
    parser.add_argument('--json', default='')
    parser.add_argument('--feed', type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.feed:
        feed(args.feed, args.camera_rate, args.joint_rate, args.width, args.height)
        return 0
    sys.setswitchinterval(args.switch_interval)
    if args.reuse_large_allocations and not reuse_large_allocations():
        raise SystemExit('reuse_large_allocations did not take (not glibc, or malloc set in '
                         'the environment)')
    runs = []
    for arms in [int(n) for n in args.arms.split(',')]:
        for mode in args.modes.split(','):
            runs.append(measure(mode, arms, args.seconds, args))
            print(json.dumps(runs[-1]), flush=True)
    report = {'command': 'python benchmarks/executor_scaling.py '
                         + ' '.join(argv if argv is not None else sys.argv[1:]),
              'python': platform.python_version(), 'cpus': os.cpu_count(),
              'switch_interval_s': args.switch_interval, 'frame': [args.width, args.height],
              'reuse_large_allocations': args.reuse_large_allocations,
              # The measured process's peak resident memory, all runs together.
              'max_rss_mib': round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
              'camera_rate': args.camera_rate, 'joint_rate': args.joint_rate, 'runs': runs}
    if args.json:
        with open(args.json, 'w') as stream:
            json.dump(report, stream, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
