# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
Expert demonstrations of the touch task into a LeRobotDataset, headless, in one command.

    python -m pi0_ros.tools.collect --episodes 200 --output datasets/touch

Three processes over DDS, as on a robot: the MuJoCo simulator (`pi0_ros.sim.node`), the recorder
(`pi0_ros.tools.record`, commanded actions), and this one, which drives the episodes: reset the
simulator to episode k, start a recording, publish the scripted expert's JointTrajectory (IK and
a jerk-limited path, pi0_ros/sim/expert.py) to the simulated arm's controller topic, wait for the
simulator's outcome, then save the episode (successes only; `--keep-failures` keeps all). Each
episode is judged by the simulator; the report (`<output>_collect.json`) gives the expert's
success rate, the time taken and the episodes per minute.
"""
import argparse
import json
import os
from pathlib import Path
import sys
import threading
import time

from pi0_ros.tools.domain import claim_domain_id
from pi0_ros.tools.processes import Process, ros_args

SIM = 'pi0_sim'
RECORDER = 'pi0_recorder'
TRAJECTORY_TOPIC = 'arm_controller/joint_trajectory'
START_LEAD_S = 0.1  # the expert's trajectory starts this long after it is sent
SETTLE_S = 0.25  # after a reset, before recording: frames rendered before it are gone
TAIL_S = 0.3  # recorded after the outcome
JOINT_STATE_RATE = 100.0  # Hz: the simulator's least (each message costs every subscriber CPU)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--episodes', type=int, default=200)
    parser.add_argument('--output', required=True, help='dataset directory (appended to)')
    parser.add_argument('--first-episode', type=int, default=0,
                        help='index of the first simulated episode (seeded)')
    parser.add_argument('--seed', type=int, default=0, help="the simulator's episode_seed")
    parser.add_argument('--fps', type=int, default=30)
    parser.add_argument('--image-width', type=int, default=128)
    parser.add_argument('--image-height', type=int, default=96)
    parser.add_argument('--timeout', type=float, default=8.0,
                        help='simulated seconds per episode')
    parser.add_argument('--real-time-factor', type=float, default=0.5,
                        help='simulated seconds per wall-clock second (every process runs on '
                             "the simulator's /clock): below 1 leaves the CPU time for 30 fps "
                             'of three cameras, their recording and the physics on 2 cores')
    parser.add_argument('--keep-failures', action='store_true',
                        help='save failed episodes too (default: successes only)')
    parser.add_argument('--repo-id', default='local/so101_touch')
    parser.add_argument('--report', default='', help='JSON report (default <output>_collect.json)')
    parser.add_argument('--domain-id', type=int, default=None)
    parser.add_argument('--startup-timeout', type=float, default=120.0)
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.first_episode < 0 or args.timeout <= 0 or not (
            0.01 <= args.real_time_factor <= 10.0):
        parser.error('--episodes must be >= 1, --first-episode >= 0, --timeout > 0, '
                     '--real-time-factor within [0.01, 10]')
    return args


class Driver:
    """This process's ROS side: the simulator's and recorder's services, the expert's topic."""

    def __init__(self, node):
        from pi0_ros.msg import EpisodeState
        from pi0_ros.qos import COMMAND_QOS, REPORT_QOS
        from pi0_ros.srv import ResetEpisode, StartEpisode
        from std_srvs.srv import SetBool
        from trajectory_msgs.msg import JointTrajectory

        self.node = node
        self._reset = node.create_client(ResetEpisode, f'/{SIM}/reset_episode')
        self._start = node.create_client(StartEpisode, f'/{RECORDER}/start_episode')
        self._stop = node.create_client(SetBool, f'/{RECORDER}/stop_episode')
        self._types = ResetEpisode, StartEpisode, SetBool
        self.trajectory = node.create_publisher(JointTrajectory, TRAJECTORY_TOPIC, COMMAND_QOS)
        self._state_lock = threading.Lock()
        self._state = None
        self._state_changed = threading.Condition(self._state_lock)
        node.create_subscription(EpisodeState, f'/{SIM}/episode', self._state_callback,
                                 REPORT_QOS)

    def _state_callback(self, msg):
        with self._state_changed:
            self._state = msg
            self._state_changed.notify_all()

    def ready(self):
        """Return whether both services are there and the simulator publishes its state."""
        with self._state_lock:
            heard = self._state is not None
        return heard and all(c.service_is_ready() for c in (self._reset, self._start, self._stop))

    def call(self, client, request, timeout=30.0):
        """Call a service; return its response; raise RuntimeError on a timeout."""
        future = client.call_async(request)
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        if not done.wait(timeout):
            client.remove_pending_request(future)
            raise RuntimeError(f'{client.srv_name} did not answer within {timeout:.0f} s')
        return future.result()

    def reset(self, episode):
        """Reset the simulator to `episode`; return its response."""
        return self.call(self._reset, self._types[0].Request(episode=episode))

    def start(self, task):
        """Start a recording of `task`; return the response."""
        return self.call(self._start, self._types[1].Request(task=task))

    def stop(self, save):
        """Stop the recording, saving it or not; return the response."""
        return self.call(self._stop, self._types[2].Request(data=bool(save)), timeout=120.0)

    def wait_state(self, predicate, timeout):
        """Return the first episode state that satisfies `predicate`, or None on a timeout."""
        deadline = time.monotonic() + timeout
        with self._state_changed:
            while self._state is None or not predicate(self._state):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._state_changed.wait(left)
            return self._state


def expert_trajectory(ik, state, start_stamp):
    """Return the expert's JointTrajectory for the episode `state` describes."""
    from builtin_interfaces.msg import Duration
    import numpy as np
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from pi0_ros.conversions import seconds_to_stamp
    from pi0_ros.sim.expert import plan_touch
    from pi0_ros.sim.scene import HOME_POSITION, JOINT_NAMES, OBJECTS

    half_height = next(item.half_height for item in OBJECTS if item.name == state.target)
    path = plan_touch(ik, HOME_POSITION, np.asarray(state.target_position), half_height)
    msg = JointTrajectory()
    msg.header.stamp = seconds_to_stamp(start_stamp)
    msg.joint_names = list(JOINT_NAMES)
    for time_from_start, position, velocity, acceleration in zip(
            path.times, path.positions, path.velocities, path.accelerations):
        seconds = int(time_from_start)
        msg.points.append(JointTrajectoryPoint(
            positions=position.tolist(), velocities=velocity.tolist(),
            accelerations=acceleration.tolist(),
            time_from_start=Duration(sec=seconds,
                                     nanosec=int(round((time_from_start - seconds) * 1e9)))))
    return msg


def run_episode(driver, ik, index, args):
    """Run one expert episode; return (outcome name, time to outcome, saved, stop message)."""
    from pi0_ros.msg import EpisodeState
    from pi0_ros.sim.tasks import Outcome

    reset = driver.reset(index)
    if not reset.success:
        raise RuntimeError(f'reset to episode {index} failed: {reset.message}')
    wall = 1.0 / args.real_time_factor  # wall-clock seconds per simulated second
    state = driver.wait_state(lambda s: s.episode == index
                              and s.outcome == EpisodeState.OUTCOME_RUNNING, 5.0 * wall)
    if state is None:
        raise RuntimeError(f'the simulator did not report episode {index}')
    time.sleep(SETTLE_S * wall)
    deadline = time.monotonic() + 30.0
    started = driver.start(reset.instruction)
    while not started.success and 'inputs silent' in started.message and (
            time.monotonic() < deadline):  # its subscriptions are still being matched
        time.sleep(0.5)
        started = driver.start(reset.instruction)
    if not started.success:
        raise RuntimeError(f'the recorder did not start: {started.message}')
    now = driver.node.get_clock().now().nanoseconds * 1e-9
    driver.trajectory.publish(expert_trajectory(ik, state, now + START_LEAD_S))
    final = driver.wait_state(lambda s: s.episode == index
                              and s.outcome != EpisodeState.OUTCOME_RUNNING,
                              (args.timeout + 2.0) * wall)
    outcome = Outcome(final.outcome) if final is not None else Outcome.TIMEOUT
    time.sleep(TAIL_S * wall)
    save = outcome == Outcome.SUCCESS or args.keep_failures
    stopped = driver.stop(save)
    outcome_time = final.outcome_time if final is not None else args.timeout
    return outcome.name.lower(), outcome_time, save and stopped.success, stopped.message


def main(argv=None):
    """Collect the episodes; return 0 when every episode ran (whatever its outcome), else 1."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    output = Path(args.output).resolve()
    report_path = Path(args.report) if args.report else output.with_name(
        output.name + '_collect.json')
    logs = output.with_name(output.name + '_logs')
    logs.mkdir(parents=True, exist_ok=True)
    domain_id = args.domain_id if args.domain_id is not None else claim_domain_id()
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain_id), PYTHONUNBUFFERED='1')
    env.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    env.setdefault('MUJOCO_GL', 'egl')
    os.environ.update({key: env[key] for key in ('ROS_DOMAIN_ID',
                                                 'ROS_AUTOMATIC_DISCOVERY_RANGE')})

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from tqdm import tqdm

    from pi0_ros.sim.expert import ToolIK
    from pi0_ros.sim.scene import build_model

    sim = Process('sim', [sys.executable, '-m', 'pi0_ros.sim.node'] + ros_args({
        'camera_rate': float(args.fps), 'image_width': args.image_width,
        'image_height': args.image_height, 'episode_seed': args.seed,
        'episode_timeout': args.timeout, 'publish_instruction': True,
        'joint_state_rate': JOINT_STATE_RATE, 'use_sim_time': True, 'publish_clock': True,
        'real_time_factor': args.real_time_factor}), env, logs)
    recorder = Process('recorder', [sys.executable, '-m', 'pi0_ros.tools.record'] + ros_args({
        'output': str(output), 'fps': args.fps, 'repo_id': args.repo_id,
        'trajectory_topic': TRAJECTORY_TOPIC, 'use_sim_time': True}), env, logs)
    processes = [sim, recorder]
    rclpy.init(args=[])
    node = rclpy.create_node('pi0_collect', parameter_overrides=[
        Parameter('use_sim_time', Parameter.Type.BOOL, True)])
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, name='pi0_collect_spin', daemon=True)
    spinner.start()
    driver = Driver(node)
    ik = ToolIK(build_model(64, 64))
    episodes = []
    failure = ''
    started = time.monotonic()
    try:
        deadline = time.monotonic() + args.startup_timeout
        while not driver.ready():
            if time.monotonic() > deadline or not all(p.alive() for p in processes):
                raise RuntimeError('the simulator or the recorder did not come up; logs in '
                                   f'{logs}')
            time.sleep(0.2)
        started = time.monotonic()
        bar = tqdm(range(args.first_episode, args.first_episode + args.episodes),
                   desc='episodes', unit='ep')
        for index in bar:
            outcome, outcome_time, saved, message = run_episode(driver, ik, index, args)
            episodes.append({'episode': index, 'outcome': outcome, 'time_s': outcome_time,
                             'saved': saved, 'recorder': message})
            successes = sum(e['outcome'] == 'success' for e in episodes)
            bar.set_postfix(success=f'{successes}/{len(episodes)}')
            if not all(p.alive() for p in processes):
                raise RuntimeError('a process exited; logs in ' + str(logs))
    except (RuntimeError, KeyboardInterrupt) as error:
        failure = str(error) or type(error).__name__
        print(f'pi0_ros collect: stopped: {failure}', file=sys.stderr)
    finally:
        elapsed = time.monotonic() - started
        exit_codes = {p.name: p.stop() for p in (recorder, sim)}
        executor.shutdown()
        spinner.join(timeout=5.0)
        node.destroy_node()
        rclpy.try_shutdown()
    report = summarize(args, output, episodes, elapsed, failure, exit_codes)
    report_path.write_text(json.dumps(report, indent=1) + '\n')
    if episodes:
        plot(report, report_path.with_suffix('.png'))
    print(f"pi0_ros collect: {report['episodes']} episodes in {elapsed / 60:.1f} min "
          f"({report['episodes_per_minute']:.2f}/min), expert success "
          f"{report['expert_success_rate']:.3f}, {report['saved_episodes']} saved into {output} "
          f"({report['dataset_mib']:.0f} MiB); report {report_path}")
    return 0 if not failure and exit_codes['recorder'] == 0 else 1


def summarize(args, output, episodes, elapsed, failure, exit_codes):
    """Return the collection's report (a JSON-able dict)."""
    count = len(episodes)
    successes = sum(e['outcome'] == 'success' for e in episodes)
    times = sorted(e['time_s'] for e in episodes if e['outcome'] == 'success')
    size = sum(f.stat().st_size for f in output.rglob('*') if f.is_file()) if output.exists() \
        else 0
    return {
        'episodes': count, 'expert_episodes': count, 'successes': successes,
        'expert_success_rate': successes / count if count else 0.0,
        'saved_episodes': sum(e['saved'] for e in episodes),
        'time_to_success_p50_s': times[len(times) // 2] if times else None,
        'elapsed_s': elapsed, 'episodes_per_minute': 60.0 * count / elapsed if elapsed else 0.0,
        'dataset_mib': size / 2**20, 'fps': args.fps,
        'image_size': [args.image_width, args.image_height], 'seed': args.seed,
        'first_episode': args.first_episode, 'cpu_count': os.cpu_count(),
        'failure': failure, 'exit_codes': exit_codes, 'per_episode': episodes,
    }


def plot(report, path):
    """Write the report's figure: the outcome and its time per episode, and their spread."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    per_episode = report['per_episode']
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for outcome, colour in (('success', 'tab:green'), ('wrong_object', 'tab:red'),
                            ('timeout', 'tab:orange')):
        chosen = [e for e in per_episode if e['outcome'] == outcome]
        left.scatter([e['episode'] for e in chosen], [e['time_s'] for e in chosen], s=8,
                     color=colour, label=f'{outcome} ({len(chosen)})')
    left.set_xlabel('episode')
    left.set_ylabel('simulated seconds to the outcome')
    left.set_title(f"expert: {report['successes']}/{report['episodes']} successes")
    left.legend()
    right.hist([e['time_s'] for e in per_episode if e['outcome'] == 'success'], bins=20)
    right.set_xlabel('simulated seconds to success')
    right.set_ylabel('episodes')
    right.set_title(f"{report['episodes_per_minute']:.2f} episodes/min (wall clock) on "
                    f"{report['cpu_count']} cores")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


if __name__ == '__main__':
    raise SystemExit(main())
