# Copyright 2026 The pi0_ros Authors
# SPDX-License-Identifier: Apache-2.0
"""
The robot on another host: the policy node and the robot in two network namespaces.

Between them an emulated link (test/link_emulator.py: 20 ms each way, 1 % of frames lost, as
netem would); DDS over UDP only (no shared memory across the "hosts"); JPEG cameras. The node
keeps its control rate whatever the link does; it holds when the link goes down or delays the
robot's data past the staleness limits, and follows again when the link recovers.
"""
import json
import os
from pathlib import Path
import sys
import time

import numpy as np
import pytest

from link_emulator import EmulatedLink, unavailable
from pi0_ros.msg import PolicyStatus
from pi0_ros.tools.processes import FASTDDS_PROFILE_VARIABLE, Process, ros_args

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONTROL_RATE = 50.0
GOOD_LINK = (0.020, 0.01)            # delay each way (s), share of frames lost
NODE_PARAMETERS = {'device': 'cpu', 'control_rate': CONTROL_RATE, 'status_rate': 5.0,
                   'observation_timeout': 0.5, 'joint_state_timeout': 0.25,
                   'camera_transports': ['compressed'] * 3, 'max_image_width': 640,
                   'max_image_height': 480}
HERE = Path(__file__).resolve().parent
FOLLOWING, HOLDING = PolicyStatus.OUTPUT_FOLLOWING, PolicyStatus.OUTPUT_HOLDING


def read_record(path: Path) -> list:
    """Return the JSON lines a remote_robot.py process wrote so far (not a partial last one)."""
    lines = path.read_text().splitlines() if path.exists() else []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


def window(records: list, kind: str, start: float, end: float) -> list:
    return [r for r in records if r['kind'] == kind and start <= r['t'] < end]


class RemoteRobotRig:
    """The link, the node in the policy namespace, the robot and a monitor beside the node."""

    def __init__(self, tmp_path: Path, domain_id: int):
        self.tmp_path = tmp_path
        self.env = dict(os.environ, ROS_DOMAIN_ID=str(domain_id), PYTHONUNBUFFERED='1',
                        ROS_AUTOMATIC_DISCOVERY_RANGE='SUBNET',
                        # UDP only, as between two hosts (with the default transports too,
                        # Fast DDS sent everything through the link in a trial run).
                        FASTDDS_BUILTIN_TRANSPORTS='UDPv4')
        self.env.pop(FASTDDS_PROFILE_VARIABLE, None)
        self.processes = []
        self.link = EmulatedLink(*GOOD_LINK)
        self.node = self._start('node', self.link.policy_ns,
                                ['-m', 'pi0_ros.node', *ros_args(NODE_PARAMETERS)])
        self.robot_record = tmp_path / 'robot.jsonl'
        self.monitor_record = tmp_path / 'monitor.jsonl'
        self._start('robot', self.link.robot_ns, [str(HERE / 'remote_robot.py'), '--role',
                                                  'robot', '--record', str(self.robot_record)])
        self._start('monitor', self.link.policy_ns, [
            str(HERE / 'remote_robot.py'), '--role', 'monitor', '--record',
            str(self.monitor_record)])

    def _start(self, name, namespace, args):
        process = Process(name, EmulatedLink.exec_prefix(namespace) + [sys.executable, *args],
                          self.env, self.tmp_path, cwd=self.tmp_path)
        self.processes.append(process)
        return process

    def statuses(self, record=None):
        return [r for r in read_record(record or self.monitor_record) if r['kind'] == 'status']

    def wait_for_status(self, state, timeout, since=0.0):
        """Monotonic time of the first status in `state` after `since` (fails on timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hit = next((r for r in self.statuses() if r['t'] > since
                        and r['output_state'] == state), None)
            if hit is not None:
                return hit['t']
            assert all(p.alive() for p in self.processes), self.report()
            time.sleep(0.1)
        raise AssertionError(f'no {state} status within {timeout} s\n{self.report()}')

    def report(self):
        statuses = self.statuses()
        last = statuses[-1] if statuses else None
        return (f'link counters {self.link.counters()}; last status beside the node {last}\n'
                + '\n'.join(f'--- {p.name} ---\n{p.tail(15)}' for p in self.processes))

    def close(self):
        for process in reversed(self.processes):
            process.stop()
        self.link.close()


@pytest.fixture
def rig(tmp_path, ros_domain_id):
    reason = unavailable()
    if reason:
        pytest.skip(f'no network namespaces here: {reason}')
    rig = RemoteRobotRig(tmp_path, ros_domain_id)
    try:
        yield rig
    finally:
        rig.close()


def command_rate(commands: list) -> float:
    times = np.array([c['t'] for c in commands])
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0


def test_policy_node_and_robot_on_two_hosts_hold_when_the_link_degrades_and_recover(rig):
    link = rig.link
    rig.wait_for_status(FOLLOWING, timeout=120.0)
    phases = {}

    def run_phase(name, delay_s, loss, seconds):
        link.impair(delay_s, loss)
        start = time.monotonic()
        time.sleep(seconds)
        phases[name] = (start, time.monotonic())

    run_phase('good', *GOOD_LINK, 8.0)
    run_phase('down', 0.0, 1.0, 4.0)
    run_phase('delayed', 0.300, 0.01, 4.0)
    link.impair(*GOOD_LINK)
    recovered_at = rig.wait_for_status(FOLLOWING, timeout=20.0, since=phases['delayed'][1])
    time.sleep(3.0)
    monitor, robot = read_record(rig.monitor_record), read_record(rig.robot_record)
    counters = link.counters()
    context = f'phases {phases}, recovered at {recovered_at}, link {counters}\n{rig.report()}'

    # Every command the node sent, and every one that crossed the link, is valid.
    for record in (monitor, robot):
        bad = [c for c in record if c['kind'] == 'command' and c['problems']]
        assert not bad, f'{bad[:3]}\n{context}'
    # The traffic went through the emulated link: delayed by it, some frames dropped.
    assert counters['dropped'] > 0 and counters['sent'] > 1000, context
    start, end = phases['good']
    crossed = window(robot, 'command', start + 1.0, end)
    left_node = {c['stamp']: c['t'] for c in monitor if c['kind'] == 'command'}
    transit = [c['t'] - left_node[c['stamp']] for c in crossed if c['stamp'] in left_node]
    assert GOOD_LINK[0] <= np.median(transit) < GOOD_LINK[0] + 0.05, f'{transit}\n{context}'

    # Good link: the node follows at its rate, and the robot receives nearly every command.
    sent = window(monitor, 'command', start + 1.0, end)
    assert abs(command_rate(sent) - CONTROL_RATE) <= 0.02 * CONTROL_RATE, context
    assert len(crossed) >= 0.9 * len(sent), context
    states = [s['output_state'] for s in window(monitor, 'status', start + 1.0, end)]
    assert states.count(FOLLOWING) >= 0.8 * len(states), f'{states}\n{context}'

    # Link down, then data delayed past the joint-state timeout: the node holds the arm at rest
    # within a second, at its control rate, and says why.
    for name, reasons in (('down', {'joint states stale', 'observation stale'}),
                          ('delayed', {'joint states stale'})):
        start, end = phases[name]
        late = window(monitor, 'status', start + 1.0, end)
        assert late and all(s['output_state'] == HOLDING and s['hold_reason'] in reasons
                            for s in late), f'{name}: {late}\n{context}'
        held = window(monitor, 'command', start + 1.0, end)
        assert abs(command_rate(held) - CONTROL_RATE) <= 0.05 * CONTROL_RATE, context
        assert all(c['at_rest'] for c in held), f'{name}: a command in motion\n{context}'
        assert all(c['last'] == held[0]['last'] for c in held), f'{name}: moved\n{context}'

    # Link back: the node follows again and the robot receives its commands.
    after = window(robot, 'command', recovered_at + 0.5, recovered_at + 2.5)
    assert len(after) >= 0.8 * CONTROL_RATE * 2.0, context
    statuses_at_robot = [s for s in robot if s['kind'] == 'status' and s['t'] > recovered_at]
    assert any(s['output_state'] == FOLLOWING for s in statuses_at_robot), context
